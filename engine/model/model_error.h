// Errors a user can cause with a model folder or file: the message names the file (and the
// tensor, where there is one), says what is wrong and what to do.
#pragma once

#include <stdexcept>
#include <string>

namespace tandem::model {

class ModelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace tandem::model
