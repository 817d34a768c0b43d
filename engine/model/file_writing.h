// What the model file writers share: the sentence for a failed write, and putting a file
// written under a temporary name in place once whole.
#pragma once

#include <cstdio>
#include <string>

namespace tandem::model {

// Throws ModelError for a write of the temporary file `temp` that failed with
// `error_number` (errno): a full disk, a file too large for the file system, or the system's
// own words, each with what to do.
[[noreturn]] void throw_write_failed(const std::string& temp, int error_number);

// Flushes `file` (written as `temp`) to the disk, closes it (file becomes null either way)
// and renames it to `path`. Throws ModelError with a sentence when any step fails.
void put_in_place(std::FILE*& file, const std::string& temp, const std::string& path);

}  // namespace tandem::model
