// Compiled with src/launcher's include root by tests/layering: must compile (the launcher may use config), which
// shows the failing cases above fail for the engine include and not for a broken command.
#include "config/feature_gate.h"
#include "launcher/launcher.h"
