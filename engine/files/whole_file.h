// Small files written whole or not at all: profiles, expert statistics, dumped logits, the GPU
// speeds' cache, export scripts. (Converted weights and downloads, which resume, keep their
// own temporary files: engine/model/file_writing.h, engine/hub/part_file.h.)
#pragma once

#include <string>
#include <string_view>

namespace tandem::files {

// Writes `bytes` to `path + ".part"`, flushes it to the disk and renames it over `path`, so a
// reader finds the old file or the new one, never half of one. Makes no folders. Returns an
// empty string when done; otherwise what went wrong in words ("the disk is full; ...", the
// system's own words), with the .part file removed and `path` untouched.
std::string write_whole_file(const std::string& path, std::string_view bytes,
                             bool executable = false);

// Whether the folder a file at `path` goes into exists and may be written: asked before a
// long run whose result would otherwise be lost at its end.
bool folder_writable_for(const std::string& path);

// The words for a write that failed with `error_number` (errno), with what to do: a full disk,
// a file too large for the file system or for ulimit -f, or the system's own words.
std::string write_failure_words(int error_number);

}  // namespace tandem::files
