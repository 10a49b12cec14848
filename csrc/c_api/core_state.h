// The process's running engine and process info, owned by the Python binding
// (which creates them at horo.init()) and read by the C interface.
#pragma once

#include <memory>

#include "engine/engine.h"
#include "transport/mpi_context.h"

namespace horo {

// Null before horo.init() and after shutdown.
std::shared_ptr<Engine> running_engine();
// False before horo.init().
bool running_process_info(ProcessInfo* info);

}  // namespace horo
