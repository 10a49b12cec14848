// One error type crosses every layer: it carries a message that already names
// the tensor, the ranks and the mismatch, and becomes horo.HoroError in Python.
#pragma once

#include <stdexcept>
#include <string>

namespace horo {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace horo
