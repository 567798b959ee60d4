// Compiled with src/launcher's include root by tests/layering: must fail, the engine is not on the launcher's path.
#include "launcher/launcher.h"
#include "runtime/engine_impl.h"
