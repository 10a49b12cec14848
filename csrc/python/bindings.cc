// The only file that knows about Python. It exposes the process model and
// a framework-free enqueue of raw buffers (pointer + dtype + shape): the
// NumPy API and every framework plugin are thin Python adapters over it, so
// no framework header is ever compiled in and one build serves every
// framework version.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>

#include "c_api/core_state.h"
#include "horo_c_api.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/tunables.h"
#include "engine/buffer_pool.h"
#include "engine/engine.h"
#include "transport/mpi_context.h"
#include "transport/mpi_transport.h"

namespace py = pybind11;
using namespace horo;

namespace {

// Shared: a thread blocked in wait() keeps the engine alive while another shuts it down.
// Replaced only with std::atomic_store: native framework kernels read it from their own threads.
std::shared_ptr<Engine> g_engine;
ProcessInfo g_info;

void require_init() {
  if (!g_engine) throw py::value_error("horo has not been initialized; call horo.init() first");
}

void init(int64_t fortran_comm) {
  if (g_engine) return;
  Tunables tunables = Tunables::from_environment();
  MPI_Comm user = MPI_COMM_NULL;
  int mpi_up = 0;
  MPI_Initialized(&mpi_up);
  if (fortran_comm >= 0) {
    if (!mpi_up) throw Error("a communicator was passed to horo.init() but MPI is not initialized");
    user = MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_comm));
  }
  MPI_Comm ours = mpi_attach(user, &g_info);
  set_log_context(g_info.rank, tunables.log_level);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  tunables.spin_microseconds = static_cast<unsigned>(g_info.local_size) <= cores ? 50 : 0;
  std::atomic_store(&g_engine, std::make_shared<Engine>(std::make_unique<MpiTransport>(ours), tunables));
}

void shutdown() {
  if (!g_engine) return;
  py::gil_scoped_release release;
  g_engine->shutdown();
  std::atomic_store(&g_engine, std::shared_ptr<Engine>());
}

int enqueue(int type, const std::string& name, uintptr_t input, uintptr_t output, int dtype,
            std::vector<int64_t> shape, int op, double prescale, double postscale, int root,
            std::vector<int64_t> splits, int process_set) {
  require_init();
  if (!collective_valid(type)) throw py::value_error("'" + name + "': unknown collective " + std::to_string(type));
  const std::string kind = collective_name(static_cast<CollectiveType>(type));
  if (!dtype_valid(dtype)) throw py::type_error(kind + " '" + name + "': unsupported dtype code");
  if (!op_valid(op)) throw py::value_error(kind + " '" + name + "': unsupported reduction op " + std::to_string(op));
  TensorEntry entry;
  entry.request.type = static_cast<CollectiveType>(type);
  entry.request.dtype = static_cast<DataType>(dtype);
  entry.request.op = static_cast<ReduceOp>(op);
  entry.request.prescale = prescale;
  entry.request.postscale = postscale;
  entry.request.shape = std::move(shape);
  entry.request.name = name;
  entry.request.root = root;
  entry.request.splits = std::move(splits);
  entry.request.process_set = process_set;
  entry.input = reinterpret_cast<const void*>(input);
  entry.output = reinterpret_cast<void*>(output);
  return g_engine->enqueue(std::move(entry));
}

// None, or (uint8 array owning the core-allocated output, shape, received splits, value).
py::object wait(int handle) {
  require_init();
  std::shared_ptr<Engine> engine = g_engine;
  HandleTable::Result result;
  {
    py::gil_scoped_release release;
    result = engine->wait(handle);
  }
  if (!result.error.empty()) throw Error(result.error);
  if (!result.allocated) return py::none();
  auto owner = new std::shared_ptr<AllocatedOutput>(result.allocated);
  py::capsule free_when_done(owner, [](void* p) { delete static_cast<std::shared_ptr<AllocatedOutput>*>(p); });
  auto& bytes = result.allocated->bytes;
  py::array_t<uint8_t> data({static_cast<py::ssize_t>(bytes.size())}, {1}, reinterpret_cast<uint8_t*>(bytes.data()),
                            free_when_done);
  return py::make_tuple(data, py::tuple(py::cast(result.allocated->shape)),
                        py::cast(result.allocated->received_splits), result.allocated->value);
}

}  // namespace

std::shared_ptr<Engine> horo::running_engine() { return std::atomic_load(&g_engine); }

bool horo::running_process_info(ProcessInfo* info) {
  if (!std::atomic_load(&g_engine)) return false;
  *info = g_info;
  return true;
}

PYBIND11_MODULE(_core, m) {
  m.doc() = "horo's compiled core: MPI transport, background coordination, fusion, ring all-reduce";
  py::register_exception<Error>(m, "HoroError", PyExc_RuntimeError);

  m.def("init", &init, py::arg("comm_f2py") = -1,
        "Start horo on MPI_COMM_WORLD, or on the communicator with this Fortran handle (mpi4py's comm.py2f()).");
  m.def("shutdown", &shutdown);
  m.def("finalize", [] {
    shutdown();
    mpi_detach();
  });
  m.def("is_initialized", [] { return static_cast<bool>(g_engine); });
  m.def("is_running", [] { return g_engine && !g_engine->stopped(); });
  m.def("rank", [] { require_init(); return g_info.rank; });
  m.def("size", [] { require_init(); return g_info.size; });
  m.def("local_rank", [] { require_init(); return g_info.local_rank; });
  m.def("local_size", [] { require_init(); return g_info.local_size; });
  m.def("cross_rank", [] { require_init(); return g_info.cross_rank; });
  m.def("cross_size", [] { require_init(); return g_info.cross_size; });
  m.def("mpi_threads_supported", [] { require_init(); return g_info.threads_multiple; });

  m.def("enqueue", &enqueue, py::arg("type"), py::arg("name"), py::arg("input"), py::arg("output"), py::arg("dtype"),
        py::arg("shape"), py::arg("op"), py::arg("prescale"), py::arg("postscale"), py::arg("root"),
        py::arg("splits"), py::arg("process_set") = 0, "Hands a collective on raw buffers to the background thread; returns its handle.");
  m.def("poll", [](int handle) { require_init(); return g_engine->poll(handle); });
  m.def(
      "start_timeline",
      [](const std::string& path, bool mark_cycles) {
        require_init();
        g_engine->start_timeline(path, mark_cycles);
      },
      py::arg("file_path"), py::arg("mark_cycles") = false,
      "Rank 0 starts writing a Chrome trace of every tensor's phases to file_path (replacing a running one).");
  m.def(
      "stop_timeline",
      [] {
        require_init();
        std::shared_ptr<Engine> engine = g_engine;
        py::gil_scoped_release release;
        engine->stop_timeline();
      },
      "Rank 0 finishes and closes the timeline file.");
  m.def("wait", &wait, "Block until the handle completes; raise HoroError if it failed.");
  m.def(
      "c_api_address", [] { return reinterpret_cast<uintptr_t>(horo_c_api_table()); },
      "Address of the C function table (c_api/horo_c_api.h) that native framework ops call.");
  m.attr("c_api_version") = HORO_C_API_VERSION;
  m.attr("collective_codes") = [] {
    py::dict codes;
    for (int t = 0; t < kNumCollectiveTypes; ++t) codes[collective_name(static_cast<CollectiveType>(t))] = t;
    return codes;
  }();

  m.def(
      "empty",
      [](size_t bytes) {
        // A caller-visible output from the buffer pool (see engine/buffer_pool.h).
        auto owner = new std::shared_ptr<char>(BufferPool::instance().acquire(bytes));
        py::capsule release(owner, [](void* p) { delete static_cast<std::shared_ptr<char>*>(p); });
        return py::array_t<uint8_t>({static_cast<py::ssize_t>(bytes)}, {1}, reinterpret_cast<uint8_t*>(owner->get()),
                                    release);
      },
      "Uninitialised bytes for an output array, recycled once the array is dropped.");
  m.def("tunables", [] {
    py::list rows;
    for (const auto& spec : tunable_specs()) {
      py::dict row;
      row["env"] = spec.env;
      row["horovod_alias"] = spec.horovod_alias;
      row["default"] = spec.default_value;
      row["doc"] = spec.doc;
      rows.append(row);
    }
    return rows;
  });
}
