// A non-owning reference to a callable, for predicates a wait tests in a loop
// (C++26's std::function_ref). A std::function made from a lambda that
// captures more than two pointers allocates on the heap, and the waits of
// every shared-memory step take one: two allocations per small collective.
// The referenced callable must outlive the FunctionRef (pass temporaries
// only as arguments).
#pragma once

#include <type_traits>
#include <utility>

namespace horo {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f)  // NOLINT: implicit, as std::function's
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace horo
