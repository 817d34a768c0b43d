// What a failed write of a model file tells the user.
#pragma once

#include <string>

namespace tandem::model {

// Throws ModelError for a write of the temporary file `temp` that failed with
// `error_number` (errno): a full disk, a file too large for the file system, or the system's
// own words, each with what to do.
[[noreturn]] void throw_write_failed(const std::string& temp, int error_number);

}  // namespace tandem::model
