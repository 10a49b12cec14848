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
#include <chrono>
#include <memory>
#include <thread>
#include <unordered_map>

#include "c_api/core_state.h"
#include "horo_c_api.h"
#include "common/error.h"
#include "common/function_ref.h"
#include "common/logging.h"
#include "common/tunables.h"
#include "engine/buffer_pool.h"
#include "engine/engine.h"
#include "gpu/collective_outcome.h"
#include "gpu/cuda_loader.h"
#include "gpu/nccl_loader.h"
#include "gpu/nccl_wait.h"
#include "transport/mpi_context.h"
#include "transport/mpi_transport.h"
#include "transport/transport_choice.h"
#include "transport/world_transport.h"

namespace py = pybind11;
using namespace horo;

namespace {

// Shared: a thread blocked in wait() keeps the engine alive while another shuts it down.
// Replaced only with std::atomic_store: native framework kernels read it from their own threads.
std::shared_ptr<Engine> g_engine;
ProcessInfo g_info;
std::string g_transport = "none";  // what carries the global set (world_transport.h)

// Buffers of blocking calls that a signal interrupted (handle -> the caller's
// arrays): the core still reads and writes them, so they live until it is done.
// Never destroyed: Python objects must not be released after the interpreter.
auto* g_interrupted = new std::unordered_map<int, py::object>();

void require_init() {
  if (!g_engine) throw py::value_error("horo has not been initialized; call horo.init() first");
}

// Python's logging gets every line the core prints (stall warnings above all),
// so applications can route them; stderr keeps them too.
void log_to_python(int level, const std::string& message) {
  if (!Py_IsInitialized() || _Py_IsFinalizing()) return;
  static const int kPythonLevels[] = {40, 30, 20, 10};  // logging.ERROR, WARNING, INFO, DEBUG
  py::gil_scoped_acquire gil;
  try {
    py::module_::import("logging").attr("getLogger")("horo").attr("log")(kPythonLevels[level], message);
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("horo log line");
  }
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
  tunables.settle_for_host(g_info.local_size, std::max(1u, std::thread::hardware_concurrency()));
  std::unique_ptr<Transport> world = make_world_transport(ours, g_info, tunables, &g_transport);
  tunables.topology = std::to_string(g_info.size) + " ranks = " + std::to_string(g_info.cross_size) + " host(s) x " +
                      std::to_string(g_info.local_size) + " local ranks (rank 0's host), transport " + g_transport;
  std::atomic_store(&g_engine, std::make_shared<Engine>(std::move(world), tunables));
  set_log_sink(&log_to_python);
}

// A tensor refused before it reached the queue (bad argument on this rank
// only, say) is announced to the other ranks, whose namesakes then fail too.
void reject(int type, const std::string& name, int process_set, const std::string& why) {
  if (!g_engine || !collective_valid(type)) return;
  g_engine->reject(static_cast<CollectiveType>(type), name, process_set, why);
}

void shutdown() {
  if (!g_engine) return;
  {
    py::gil_scoped_release release;
    g_engine->shutdown();
    std::atomic_store(&g_engine, std::shared_ptr<Engine>());
  }
  g_interrupted->clear();  // nothing touches their buffers any more
}

// A GPU tensor: its CUDA device and the stream that produces it. The event
// recorded there now is what horo's stream waits on before reading the tensor.
void describe_gpu_tensor(TensorEntry& entry, const std::string& kind, int device, uintptr_t stream) {
  std::string why;
  if (cuda::device_count(&why) <= 0) {
    throw Error(kind + " '" + entry.request.name + "': it is a CUDA tensor (cuda:" + std::to_string(device) +
                "), but horo cannot use a GPU here: " + why);
  }
  entry.request.memory = Memory::kCuda;
  entry.device = device;
  entry.ready = std::make_shared<CudaEvent>(device, reinterpret_cast<cuda::Stream>(stream));
}

// Completes the entry for one tensor, whose request's name, shape and splits the caller
// has set, after the checks that raise (on this rank; reject() tells the others). Host
// memory unless describe_gpu_tensor() says otherwise.
void describe(TensorEntry& entry, int type, uintptr_t input, uintptr_t output, int dtype, int op, double prescale,
              double postscale, int root, int process_set) {
  const std::string& name = entry.request.name;
  if (!collective_valid(type)) throw py::value_error("'" + name + "': unknown collective " + std::to_string(type));
  const std::string kind = collective_name(static_cast<CollectiveType>(type));
  if (!dtype_valid(dtype)) {
    reject(type, name, process_set, "unsupported dtype code " + std::to_string(dtype));
    throw py::type_error(kind + " '" + name + "': unsupported dtype code");
  }
  if (!op_valid(op)) {
    reject(type, name, process_set, "unsupported reduction op " + std::to_string(op));
    throw py::value_error(kind + " '" + name + "': unsupported reduction op " + std::to_string(op));
  }
  if (collective_reduces(static_cast<CollectiveType>(type)) && !dtype_reducible(static_cast<DataType>(dtype))) {
    const std::string why = std::string(dtype_name(static_cast<DataType>(dtype))) +
                            " tensors cannot be reduced; cast to an integer or float dtype first";
    reject(type, name, process_set, why);
    throw ArgumentError(kind + " '" + name + "': " + why);
  }
  entry.request.type = static_cast<CollectiveType>(type);
  entry.request.dtype = static_cast<DataType>(dtype);
  entry.request.op = static_cast<ReduceOp>(op);
  entry.request.prescale = prescale;
  entry.request.postscale = postscale;
  entry.request.root = root;
  entry.request.process_set = process_set;
  entry.input = reinterpret_cast<const void*>(input);
  entry.output = reinterpret_cast<void*>(output);
  if (collective_output_like_input(entry.request.type) && output == 0 && entry.request.num_elements() > 0) {
    const std::string why = "no output buffer was given (a " + kind + " writes into the caller's)";
    reject(type, entry.request.name, process_set, why);
    throw ArgumentError(kind + " '" + entry.request.name + "': " + why);
  }
}

// A new entry's request: its name, shape and splits (describe() the rest).
TensorEntry entry_named(std::string name, std::vector<int64_t> shape, std::vector<int64_t> splits) {
  TensorEntry entry;
  entry.request.name = std::move(name);
  entry.request.shape = std::move(shape);
  entry.request.splits = std::move(splits);
  return entry;
}

int enqueue(int type, std::string name, uintptr_t input, uintptr_t output, int dtype,
            std::vector<int64_t> shape, int op, double prescale, double postscale, int root,
            std::vector<int64_t> splits, int process_set, int device, uintptr_t stream, bool caller_waits) {
  require_init();
  TensorEntry entry = entry_named(std::move(name), std::move(shape), std::move(splits));
  describe(entry, type, input, output, dtype, op, prescale, postscale, root, process_set);
  if (device >= 0) describe_gpu_tensor(entry, collective_name(entry.request.type), device, stream);
  return g_engine->enqueue(std::move(entry), nullptr, caller_waits);
}

// A GPU result: `stream` (the caller's current stream) waits on horo's done
// event, so the caller's later work sees the results without a host sync.
// None, or ((device address, bytes, owner capsule, device), shape, received splits, value).
py::object gpu_result(const std::shared_ptr<AllocatedOutput>& result, uintptr_t stream) {
  {
    py::gil_scoped_release release;
    result->done->make_wait(reinterpret_cast<cuda::Stream>(stream));
    // The caller's stream now uses the output: it is freed in that stream's order, without a device sync.
    if (result->device_bytes) result->device_bytes->set_release_stream(reinterpret_cast<cuda::Stream>(stream));
  }
  if (!result->device_bytes) return py::none();
  auto owner = new std::shared_ptr<DeviceMemory>(result->device_bytes);
  py::capsule free_when_done(owner, [](void* p) { delete static_cast<std::shared_ptr<DeviceMemory>*>(p); });
  py::tuple memory = py::make_tuple(reinterpret_cast<uintptr_t>(result->device_bytes->data()),
                                    result->device_bytes->size(), free_when_done, result->device_bytes->device());
  return py::make_tuple(memory, py::tuple(py::cast(result->shape)), py::cast(result->received_splits), result->value);
}

// Waits for `handle`, in slices, checking for Python signals in between:
// Ctrl-C and SIGALRM handlers (pytest-timeout's) run, and their exception
// (py::error_already_set) ends the wait with the collective still running.
// `start` runs first under the same GIL release (run() enqueues there, setting `handle`).
HandleTable::Result await_handle(Engine& engine, int& handle, FunctionRef<void()> start) {
  constexpr auto kSlice = std::chrono::milliseconds(50);
  HandleTable::Result result;
  bool done;
  {
    py::gil_scoped_release release;
    start();
    engine.help(handle);
    done = engine.wait_for(handle, kSlice, &result);
  }
  while (!done) {
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    py::gil_scoped_release release;
    done = engine.wait_for(handle, kSlice, &result);
  }
  return result;
}

// The core-allocated output as an array owning it: flat uint8, or, given the input's `dtype`
// (every collective that allocates keeps its input's), already that dtype in the agreed shape
// (the caller's view and reshape cost 0.4 us a call).
py::array host_array(const std::shared_ptr<AllocatedOutput>& allocated, py::dtype* dtype) {
  auto owner = new std::shared_ptr<AllocatedOutput>(allocated);
  py::capsule free_when_done(owner, [](void* p) { delete static_cast<std::shared_ptr<AllocatedOutput>*>(p); });
  AllocatedOutput& out = *allocated;
  if (dtype) {
    // NumPy's own constructor: py::array's would copy the shape and work out strides in two
    // vectors first (a small allgather's output then cost two mallocs more).
    static_assert(sizeof(Py_intptr_t) == sizeof(int64_t), "NumPy's dimensions are our int64 shapes");
    auto& numpy = py::detail::npy_api::get();
    auto array = py::reinterpret_steal<py::array>(numpy.PyArray_NewFromDescr_(
        numpy.PyArray_Type_, dtype->inc_ref().ptr(), static_cast<int>(out.shape.size()),
        reinterpret_cast<Py_intptr_t*>(out.shape.data()), nullptr, out.bytes.data(),
        py::detail::npy_api::NPY_ARRAY_WRITEABLE_, nullptr));
    if (!array) throw py::error_already_set();
    numpy.PyArray_SetBaseObject_(array.ptr(), free_when_done.release().ptr());  // steals the reference
    return array;
  }
  return py::array_t<uint8_t>({static_cast<py::ssize_t>(out.bytes.size())}, {1},
                              reinterpret_cast<const uint8_t*>(out.bytes.data()), free_when_done);
}

// None, or (array owning the core-allocated output (host_array), shape, received splits, value).
py::object to_python(const HandleTable::Result& result, uintptr_t stream, py::dtype* dtype = nullptr) {
  if (!result.error.empty()) throw CollectiveError(result.error);
  if (!result.allocated) return py::none();
  if (result.allocated->done) return gpu_result(result.allocated, stream);
  AllocatedOutput& out = *result.allocated;
  return py::make_tuple(host_array(result.allocated, dtype), py::tuple(py::cast(out.shape)),
                        py::cast(out.received_splits), out.value);
}

// The handle stays valid after an interrupted wait, so synchronize() may be called on it again.
py::object wait(int handle, uintptr_t stream) {
  require_init();
  std::shared_ptr<Engine> engine = g_engine;
  return to_python(await_handle(*engine, handle, [] {}), stream);
}

void release_finished_interrupted(Engine& engine) {
  for (auto it = g_interrupted->begin(); it != g_interrupted->end();) {
    HandleTable::Result ignored;
    if (engine.poll(it->first, true) && engine.wait_for(it->first, std::chrono::milliseconds(0), &ignored)) {
      it = g_interrupted->erase(it);
    } else {
      ++it;
    }
  }
}

// Runs `entry` to completion, its cycles on the caller's thread. Should a signal end the wait
// early, `input` and `output` (the caller's arrays) are held until the collective is done.
// The entry is swapped into the queue (Engine::enqueue): it comes back holding another's buffers.
HandleTable::Result run_entry(TensorEntry& entry, py::handle input, py::handle output) {
  std::shared_ptr<Engine> engine = g_engine;
  if (!g_interrupted->empty()) release_finished_interrupted(*engine);
  int handle = -1;
  try {
    // The entry is checked before (raising with the GIL held); the enqueue itself runs without it.
    return await_handle(*engine, handle, [&] { handle = engine->enqueue(std::move(entry), nullptr, true); });
  } catch (py::error_already_set&) {
    if (handle >= 0) (*g_interrupted)[handle] = py::make_tuple(input, output);
    throw;
  }
}

// enqueue() and wait() in one crossing, for a blocking call on NumPy arrays
// (`output` None: the core allocates it): at 4 KiB each crossing's argument
// handling and GIL hand-off is a tenth of the call.
py::object run(int type, std::string name, py::array input, py::object output, int dtype, int op, double prescale,
               double postscale, int root, std::vector<int64_t> splits, int process_set) {
  require_init();
  const uintptr_t target = output.is_none() ? 0 : reinterpret_cast<uintptr_t>(output.cast<py::array>().data());
  TensorEntry entry = entry_named(std::move(name), std::vector<int64_t>(input.shape(), input.shape() + input.ndim()),
                                  std::move(splits));
  describe(entry, type, reinterpret_cast<uintptr_t>(input.data()), target, dtype, op, prescale, postscale, root,
           process_set);
  py::dtype input_dtype = input.dtype();
  return to_python(run_entry(entry, input, output), 0, &input_dtype);
}

// The dtypes of horo/dtypes.py (which owns the mapping) and their codes: run_plain() knows an
// array's dtype by the object's identity, without Python. Never destroyed (Python objects).
auto* g_plain_dtypes = new std::vector<std::pair<py::object, int>>();

int plain_dtype_code(PyObject* descr) {
  for (const auto& [dtype, code] : *g_plain_dtypes) {
    if (dtype.ptr() == descr) return code;
  }
  return -1;
}

// The common blocking call, a plain NumPy array in the global set, recognised here: a call
// Python's checks (horo/enqueue.py) would pass as it is, run without Python's naming, checking
// and finishing (1.3 us of a 4 KiB call). Anything else returns NotImplemented, and the caller
// takes the full path, which names any problem and tells the other ranks. Covers the
// collectives whose output is the core's (allgather; alltoall in even parts; reducescatter;
// scatter; gather, None but on the root),
// the input itself (`in_place`: allreduce_, broadcast_) or `output`, an array the caller made
// like the input (allreduce, broadcast). From horo/enqueue.py's plain_call(): `unnamed`, the
// name of a call without one, and `default_op`, the op of a call without one.
// Positional arguments only (see fastcall()).
py::object run_plain(PyObject* const* args, size_t given) {
  if (given < 7 || given > 12) throw py::type_error("run_plain() takes 7 to 12 positional arguments");
  static PyObject* const zero = PyLong_FromLong(0);  // the defaults (never destroyed: Python objects)
  static PyObject* const one = PyFloat_FromDouble(1.0);
  const auto arg = [&](size_t i, PyObject* otherwise = nullptr) { return py::handle(i < given ? args[i] : otherwise); };
  const int type = py::cast<int>(arg(0));
  const bool in_place = PyObject_IsTrue(arg(2).ptr());
  const py::handle tensor = arg(4), process_set = arg(6), root = arg(7, zero), prescale = arg(9, one),
                   postscale = arg(10, one), output = arg(11, Py_None);
  py::handle name = arg(5), op = arg(8, Py_None);
  auto& numpy = py::detail::npy_api::get();
  const auto not_plain = [] { return py::reinterpret_borrow<py::object>(Py_NotImplemented); };
  if (name.is_none()) name = arg(1);
  if (op.is_none()) op = arg(3);
  if (Py_TYPE(tensor.ptr()) != numpy.PyArray_Type_ || !PyUnicode_CheckExact(name.ptr()) || !process_set.is_none() ||
      !PyLong_CheckExact(root.ptr()) || !PyLong_CheckExact(op.ptr()) || !PyFloat_CheckExact(prescale.ptr()) ||
      !PyFloat_CheckExact(postscale.ptr()) || !g_engine) {
    return not_plain();
  }
  const auto* array = py::detail::array_proxy(tensor.ptr());
  using npy = py::detail::npy_api;
  const int needs = npy::NPY_ARRAY_C_CONTIGUOUS_ | (in_place ? npy::NPY_ARRAY_WRITEABLE_ : 0);
  const int dtype = plain_dtype_code(array->descr);
  int root_overflow = 0, op_overflow = 0;
  const long root_rank = PyLong_AsLongAndOverflow(root.ptr(), &root_overflow);
  const long op_code = PyLong_AsLongAndOverflow(op.ptr(), &op_overflow);
  const auto kind = static_cast<CollectiveType>(type);
  const bool covered = kind == CollectiveType::kAllgather || kind == CollectiveType::kAlltoall ||
                       kind == CollectiveType::kBroadcast || kind == CollectiveType::kReducescatter ||
                       kind == CollectiveType::kAllreduce || kind == CollectiveType::kGather ||
                       kind == CollectiveType::kScatter || kind == CollectiveType::kReduce;
  if (!covered || (in_place && !collective_output_like_input(kind)) || (array->flags & needs) != needs ||
      array->nd == 0 || dtype < 0 || root_overflow || op_overflow || root_rank != static_cast<int>(root_rank) ||
      op_code != static_cast<int>(op_code) || !op_valid(static_cast<int>(op_code)) ||
      op_code == static_cast<long>(ReduceOp::kAdasum)) {  // its checks (rank count, dtype, collective): the full path
    return not_plain();
  }
  // An output the caller made: exactly the input's kind of array (its dtype object, shape), writable.
  const bool output_given = !output.is_none();
  const auto* made = output_given ? py::detail::array_proxy(output.ptr()) : nullptr;
  const int writable = npy::NPY_ARRAY_C_CONTIGUOUS_ | npy::NPY_ARRAY_WRITEABLE_;
  if (output_given != (collective_output_like_input(kind) && !in_place) ||
      (output_given && (Py_TYPE(output.ptr()) != numpy.PyArray_Type_ || made->descr != array->descr ||
                        made->nd != array->nd || (made->flags & writable) != writable ||
                        !std::equal(array->dimensions, array->dimensions + array->nd, made->dimensions)))) {
    return not_plain();
  }
  // Even parts, Horovod's default (rows that do not divide: the full path).
  if (kind == CollectiveType::kAlltoall && array->dimensions[0] % g_info.size != 0) return not_plain();
  Py_ssize_t name_length = 0;
  const char* name_utf8 = PyUnicode_AsUTF8AndSize(name.ptr(), &name_length);
  if (!name_utf8) {  // not UTF-8 encodable: the full path says so
    PyErr_Clear();
    return not_plain();
  }
  // Described in the entry this thread used last, which the queue swapped for a finished
  // entry's: their name's and shape's buffers make the description allocate nothing.
  thread_local TensorEntry entry;
  reset_for_reuse(entry);
  entry.request.name.assign(name_utf8, static_cast<size_t>(name_length));
  entry.request.shape.assign(array->dimensions, array->dimensions + array->nd);
  if (kind == CollectiveType::kAlltoall) entry.request.splits.assign(g_info.size, array->dimensions[0] / g_info.size);
  const uintptr_t data = reinterpret_cast<uintptr_t>(array->data);
  const uintptr_t target = in_place ? data : output_given ? reinterpret_cast<uintptr_t>(made->data) : 0;
  describe(entry, type, data, target, dtype, static_cast<int>(op_code), PyFloat_AS_DOUBLE(prescale.ptr()),
           PyFloat_AS_DOUBLE(postscale.ptr()), static_cast<int>(root_rank), 0);
  const HandleTable::Result result = run_entry(entry, tensor, output);
  if (!result.error.empty()) throw CollectiveError(result.error);
  if (in_place) return py::reinterpret_borrow<py::object>(tensor);
  if (kind == CollectiveType::kReduce && root_rank != g_info.rank) return py::none();  // the root's result alone
  if (output_given) return py::reinterpret_borrow<py::object>(output);
  if (!result.allocated) return py::none();  // a gather's ranks other than the root
  py::dtype input_dtype = py::reinterpret_borrow<py::dtype>(reinterpret_cast<PyObject*>(array->descr));
  return host_array(result.allocated, &input_dtype);
}

// One blocking send or receive, started and waited for in one call; `owner` holds the buffer
// should a signal end the wait early (the core still uses it then).
void run_transfer(int process_set, bool send, void* address, size_t bytes, int peer, int tag, const std::string& name,
                  py::handle owner) {
  require_init();
  std::shared_ptr<Engine> engine = g_engine;
  if (!g_interrupted->empty()) release_finished_interrupted(*engine);
  const std::vector<PointToPoint::Op> ops{{send, address, bytes, peer, tag}};
  int handle = -1;
  try {
    to_python(await_handle(*engine, handle, [&] { handle = engine->point_to_point(process_set, ops, name); }), 0);
  } catch (py::error_already_set&) {
    if (handle >= 0) (*g_interrupted)[handle] = py::make_tuple(owner, py::none());
    throw;
  }
}

// A transfer's name: the caller's str, or Python's default for one without (false: not UTF-8).
bool transfer_label(bool send, long peer, long tag, py::handle name, std::string* label) {
  if (name.is_none()) {
    *label = (send ? "send.to" : "recv.from") + std::to_string(peer) + ".tag" + std::to_string(tag);
    return true;
  }
  Py_ssize_t length = 0;
  const char* utf8 = PyUnicode_Check(name.ptr()) ? PyUnicode_AsUTF8AndSize(name.ptr(), &length) : nullptr;
  if (!utf8) {
    PyErr_Clear();
    return false;
  }
  label->assign(utf8, static_cast<size_t>(length));
  return true;
}

// horo.send / horo.recv of a plain NumPy array in the global set, recognised here as run_plain()
// recognises a collective: an exact ndarray, C-contiguous (and writable to receive into), int
// peer and tag, a str name or None (then named as Python would). Python's checks and naming cost
// more than a small transfer (MEASUREMENTS.md, "Point-to-point and the torch.distributed backend").
// Anything else returns NotImplemented and takes horo/point_to_point.py's full path, whose errors
// name the problem.
// Positional only: (send, tensor, peer, tag, name, process_set).
py::object transfer_plain(PyObject* const* args, size_t given) {
  if (given != 6) throw py::type_error("transfer_plain() takes 6 positional arguments");
  const bool send = PyObject_IsTrue(args[0]);
  const py::handle tensor = args[1], peer = args[2], tag = args[3], name = args[4], process_set = args[5];
  const auto not_plain = [] { return py::reinterpret_borrow<py::object>(Py_NotImplemented); };
  auto& numpy = py::detail::npy_api::get();
  if (Py_TYPE(tensor.ptr()) != numpy.PyArray_Type_ || !PyLong_CheckExact(peer.ptr()) || !PyLong_CheckExact(tag.ptr()) ||
      !(name.is_none() || PyUnicode_CheckExact(name.ptr())) || !process_set.is_none() || !g_engine) {
    return not_plain();
  }
  using npy = py::detail::npy_api;
  const auto* array = py::detail::array_proxy(tensor.ptr());
  const int needs = npy::NPY_ARRAY_C_CONTIGUOUS_ | (send ? 0 : npy::NPY_ARRAY_WRITEABLE_);
  int peer_overflow = 0, tag_overflow = 0;
  const long peer_rank = PyLong_AsLongAndOverflow(peer.ptr(), &peer_overflow);
  const long tag_value = PyLong_AsLongAndOverflow(tag.ptr(), &tag_overflow);
  if ((array->flags & needs) != needs || peer_overflow || tag_overflow || peer_rank != static_cast<int>(peer_rank) ||
      tag_value != static_cast<int>(tag_value)) {
    return not_plain();
  }
  std::string label;
  if (!transfer_label(send, peer_rank, tag_value, name, &label)) return not_plain();
  const size_t bytes = static_cast<size_t>(py::reinterpret_borrow<py::array>(tensor).nbytes());
  run_transfer(0, send, array->data, bytes, static_cast<int>(peer_rank), static_cast<int>(tag_value), label, tensor);
  return py::none();
}

// The same for a buffer a framework plugin has checked (horo.torch's CPU tensors):
// (send, address, bytes, peer, tag, name or None, owner), in the global set.
py::object transfer_checked(PyObject* const* args, size_t given) {
  if (given != 7) throw py::type_error("transfer_checked() takes 7 positional arguments");
  const bool send = PyObject_IsTrue(args[0]);
  const auto address = py::cast<uintptr_t>(py::handle(args[1]));
  const auto bytes = py::cast<size_t>(py::handle(args[2]));
  const int peer = py::cast<int>(py::handle(args[3])), tag = py::cast<int>(py::handle(args[4]));
  std::string label;
  if (!transfer_label(send, peer, tag, args[5], &label)) throw py::value_error("transfer_checked: name is not UTF-8");
  run_transfer(0, send, reinterpret_cast<void*>(address), bytes, peer, tag, label, args[6]);
  return py::none();
}

// Python's exceptions for horo's (pybind11 calls this for the functions it binds).
py::handle g_horo_error, g_value_error, g_internal_error;  // set at import, never released
void translate_horo_errors(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const ArgumentError& e) {
    PyErr_SetString(g_value_error.ptr(), e.what());
  } catch (const CollectiveError& e) {
    PyErr_SetString(g_internal_error.ptr(), e.what());
  } catch (const Error& e) {
    PyErr_SetString(g_horo_error.ptr(), e.what());
  }
}

// The lanes (run_plain, transfer_plain, transfer_checked) under CPython's own calling convention
// (METH_FASTCALL): pybind11's dispatcher, whose argument list goes to the heap past six arguments,
// cost more than a lane's checks.
// Errors become Python's as pybind11 would make them.
template <py::object (*Call)(PyObject* const*, size_t)>
PyObject* fastcall(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  try {
    return Call(args, static_cast<size_t>(nargs)).release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const Error&) {
    translate_horo_errors(std::current_exception());
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

// Adds `call` to the module as a METH_FASTCALL function (its definition lives as long as the module).
void add_fastcall(py::module_& m, const char* name, PyObject* (*call)(PyObject*, PyObject* const*, Py_ssize_t),
                  const char* doc) {
  auto* def =
      new PyMethodDef{name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(call)), METH_FASTCALL, doc};
  m.add_object(name, py::reinterpret_steal<py::object>(PyCFunction_NewEx(def, nullptr, m.attr("__name__").ptr())));
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
  // HoroError stays the one base every horo error shares; its two Horovod-shaped subclasses let
  // Horovod programs catch what they catch there: ValueError for bad arguments, RuntimeError
  // (HorovodInternalError) for failures found at synchronize.
  // Never destroyed: a static py::object would be released after the interpreter has gone.
  g_horo_error = (new py::exception<Error>(m, "HoroError", PyExc_RuntimeError))->ptr();
  g_value_error = PyErr_NewException("horo.HoroValueError",
                                     py::make_tuple(g_horo_error, py::handle(PyExc_ValueError)).ptr(), nullptr);
  g_internal_error = PyErr_NewException("horo.HorovodInternalError", g_horo_error.ptr(), nullptr);
  m.attr("HoroValueError") = g_value_error;
  m.attr("HorovodInternalError") = g_internal_error;
  py::register_exception_translator(&translate_horo_errors);

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
  m.def("transport", [] { require_init(); return g_transport; });
  m.def("mpi_threads_supported", [] { require_init(); return g_info.threads_multiple; });

  m.def("enqueue", &enqueue, py::arg("type"), py::arg("name"), py::arg("input"), py::arg("output"), py::arg("dtype"),
        py::arg("shape"), py::arg("op"), py::arg("prescale"), py::arg("postscale"), py::arg("root"),
        py::arg("splits"), py::arg("process_set") = 0, py::arg("device") = -1, py::arg("stream") = 0,
        py::arg("caller_waits") = false,
        "Hands a collective on raw buffers to the background thread; returns its handle. device >= 0: the buffers "
        "are on that CUDA device, produced on `stream` (cudaStream_t as an integer). caller_waits: the caller "
        "synchronizes it right away (a blocking collective), so the background thread need not be woken for it.");
  m.def("reject", &reject, py::arg("type"), py::arg("name"), py::arg("process_set"), py::arg("why"),
        "Tells the other ranks this rank refused the named tensor at submission, so theirs fail instead of waiting.");
  m.def("poll", [](int handle) { require_init(); return g_engine->poll(handle); });
  m.def(
      "data_address",
      [](py::handle array) {
        // NumPy's own route (__array_interface__) builds a dict per call: microseconds per collective.
        if (!py::isinstance<py::array>(array)) throw py::type_error("data_address: expected a numpy.ndarray");
        return reinterpret_cast<uintptr_t>(py::reinterpret_borrow<py::array>(array).data());
      },
      py::arg("array"), "Address of an ndarray's first byte.");
  m.def(
      "start_timeline",
      [](const std::string& path, bool mark_cycles) {
        require_init();
        std::shared_ptr<Engine> engine = g_engine;
        py::gil_scoped_release release;  // it waits for the cycle lock
        engine->start_timeline(path, mark_cycles);
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
  m.def("run", &run, py::arg("type"), py::arg("name"), py::arg("input"), py::arg("output"), py::arg("dtype"),
        py::arg("op"), py::arg("prescale"), py::arg("postscale"), py::arg("root"), py::arg("splits"),
        py::arg("process_set"),
        "enqueue() and wait() of a collective on C-contiguous NumPy arrays in one call (a blocking collective; "
        "output None: the core allocates it); returns what wait() returns. Should a signal end the wait early, "
        "the arrays are held until the collective completes.");
  add_fastcall(m, "run_plain", &fastcall<run_plain>,
               "run_plain(type, unnamed, in_place, default_op, tensor, name, process_set[, root=0, op=None, "
               "prescale=1.0, postscale=1.0, output=None]), positional only: run() of the common blocking call, a "
               "plain NumPy array in the global set, without Python's checks: the result (the tensor itself when "
               "in_place, `output` when given), or NotImplemented for any other call, which then takes the full path.");
  add_fastcall(m, "transfer_plain", &fastcall<transfer_plain>,
               "transfer_plain(send, tensor, peer, tag, name, process_set), positional only: transfer() of a plain "
               "NumPy array in the global set, without Python's checks (None), or NotImplemented for any other call, "
               "which then takes the full path.");
  add_fastcall(m, "transfer_checked", &fastcall<transfer_checked>,
               "transfer_checked(send, address, bytes, peer, tag, name, owner), positional only: transfer() in the "
               "global set of a buffer the caller has checked; name None names it as Python would.");
  m.def(
      "recognise_dtypes",
      [](py::dict codes) {
        g_plain_dtypes->clear();
        for (auto [dtype, code] : codes) {
          g_plain_dtypes->emplace_back(py::reinterpret_borrow<py::object>(dtype), code.cast<int>());
        }
      },
      py::arg("codes"), "The NumPy dtypes run_plain() takes (dtype -> code), from horo/dtypes.py.");
  m.def(
      "point_to_point",
      [](int process_set, const std::vector<std::tuple<bool, uintptr_t, size_t, int, int>>& transfers,
         const std::string& name) {
        require_init();
        std::vector<PointToPoint::Op> ops;
        ops.reserve(transfers.size());
        for (const auto& [send, address, bytes, peer, tag] : transfers) {
          ops.push_back(PointToPoint::Op{send, reinterpret_cast<void*>(address), bytes, peer, tag});
        }
        std::shared_ptr<Engine> engine = g_engine;
        py::gil_scoped_release release;
        return engine->point_to_point(process_set, ops, name);
      },
      py::arg("process_set"), py::arg("transfers"), py::arg("name"),
      "Posts point-to-point transfers, each (send, address, bytes, peer's global rank, tag), together; "
      "returns one handle for all. The buffers must stay alive until it completes.");
  m.def(
      "transfer",
      [](int process_set, bool send, uintptr_t address, size_t bytes, int peer, int tag, const std::string& name,
         py::object owner) {
        run_transfer(process_set, send, reinterpret_cast<void*>(address), bytes, peer, tag, name, owner);
      },
      py::arg("process_set"), py::arg("send"), py::arg("address"), py::arg("bytes"), py::arg("peer"), py::arg("tag"),
      py::arg("name"), py::arg("owner"),
      "One blocking send or receive (point_to_point() and wait() in one call); `owner` holds the buffer.");
  m.def("wait", &wait, py::arg("handle"), py::arg("stream") = 0,
        "Block until the handle completes; raise HoroError if it failed. For GPU tensors `stream` (the caller's "
        "current cudaStream_t) is made to wait for the results.");
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
        // A caller-visible output from the global set's shared memory, which lets its peers write
        // their results straight into it (transport/shm/heap.h), else from the buffer pool.
        std::shared_ptr<char> memory;
        if (auto engine = std::atomic_load(&g_engine)) memory = engine->shared_output(bytes);
        if (!memory) memory = BufferPool::instance().acquire(bytes);
        auto owner = new std::shared_ptr<char>(std::move(memory));
        py::capsule release(owner, [](void* p) { delete static_cast<std::shared_ptr<char>*>(p); });
        return py::array_t<uint8_t>({static_cast<py::ssize_t>(bytes)}, {1}, reinterpret_cast<uint8_t*>(owner->get()),
                                    release);
      },
      "Uninitialised bytes for an output array, recycled once the array is dropped.");
  m.def(
      "set_gpu_library_candidates",
      [](std::vector<std::string> nccl_paths, std::vector<std::string> cudart_paths) {
        nccl::set_wheel_candidates(std::move(nccl_paths));
        cuda::set_wheel_candidates(std::move(cudart_paths));
      },
      py::arg("nccl"), py::arg("cudart"),
      "Library files of the nvidia-* pip wheels, searched after HORO_NCCL_LIB / HORO_CUDART_LIB.");
  m.def(
      "gpu_status",
      [] {
        // Loads the libraries (once) if they are not loaded yet; never raises for a missing one.
        py::dict status;
        std::string cuda_why, nccl_why;
        const int devices = cuda::device_count(&cuda_why);
        status["device_count"] = devices;
        status["cuda_reason"] = devices > 0 ? py::none() : py::cast(cuda_why);
        status["cudart_path"] = cuda::library_path();
        status["cudart_search_order"] = cuda::search_order();
        const nccl::Api* api = nccl::try_api(&nccl_why);
        status["nccl_version"] = api ? py::cast(nccl::version_string(api->version)) : py::none();
        status["nccl_reason"] = api ? py::none() : py::cast(nccl_why);
        status["nccl_path"] = nccl::library_path();
        status["nccl_search_order"] = nccl::search_order();
        return status;
      },
      "What the GPU path can use here: CUDA devices and NCCL, each with the reason where unavailable.");
  m.def(
      "device_empty",
      [](int device, size_t bytes, uintptr_t stream) {
        // Uninitialised device memory for a GPU output, allocated and freed (when the capsule is
        // dropped) in the order of the caller's stream, whose ready event horo's stream waits on.
        auto owner = new std::shared_ptr<DeviceMemory>(
            std::make_shared<DeviceMemory>(device, reinterpret_cast<cuda::Stream>(stream), bytes));
        py::capsule release(owner, [](void* p) { delete static_cast<std::shared_ptr<DeviceMemory>*>(p); });
        return py::make_tuple(reinterpret_cast<uintptr_t>((*owner)->data()), release);
      },
      py::arg("device"), py::arg("bytes"), py::arg("stream") = 0,
      "(device address, owner capsule) of `bytes` on CUDA device `device`, in `stream`'s order.");
  m.def("cuda_current_device", [] {
    int device = 0;
    cuda::check(cuda::api().cudaGetDevice(&device), "cudaGetDevice");
    return device;
  });
  // Test-only: the GPU path's decisions that need no GPU, run for real (tests/test_gpu_libraries.py).
  m.def(
      "_agree_outcome_for_test",
      [](uintptr_t comm_address, const std::string& local_error, const std::string& what) {
        // mpi4py's MPI._addressof(comm): a duplicate of it, so horo's traffic stays apart from the test's.
        MPI_Comm comm;
        mpi_check(MPI_Comm_dup(*reinterpret_cast<MPI_Comm*>(comm_address), &comm), "MPI_Comm_dup");
        MpiTransport transport(comm);
        py::gil_scoped_release release;
        agree_outcome(transport, local_error, what);
      },
      py::arg("comm_address"), py::arg("local_error"), py::arg("what"),
      "Runs gpu/collective_outcome.h's agreement over a duplicate of an mpi4py communicator.");
  m.def(
      "_nccl_wait_verdict_for_test",
      [](bool done, int async, double elapsed, double timeout) {
        return std::string(verdict_name(wait_verdict(done, static_cast<nccl::Result>(async), elapsed, timeout)));
      },
      py::arg("done"), py::arg("async_result"), py::arg("elapsed_seconds"), py::arg("timeout_seconds"),
      "gpu/nccl_wait.h's decision for one poll of NCCL work.");
  m.def("gpu_symbols", [] {
    py::dict symbols;
    symbols["nccl"] = nccl::symbol_names();
    symbols["cudart"] = cuda::symbol_names();
    return symbols;
  }, "Every symbol horo resolves in NCCL and the CUDA runtime.");
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
