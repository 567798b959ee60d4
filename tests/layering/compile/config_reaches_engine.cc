// Compiled with src/config's include root by tests/layering: must fail, the engine is not on config's path.
#include "config/feature_gate.h"
#include "runtime/engine_impl.h"
