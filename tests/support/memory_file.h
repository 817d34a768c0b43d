// A FILE* into memory for tests of what a printer writes (the progress printers of app/).
#pragma once

#include <QString>
#include <cstdio>
#include <cstdlib>

namespace tandem::test {

// Calls write(out) with `out` a stream into memory, and returns what was written to it.
template <typename Write>
QString written_to_memory(Write&& write) {
  char* buffer = nullptr;
  std::size_t size = 0;
  std::FILE* out = open_memstream(&buffer, &size);
  write(out);
  std::fclose(out);
  const QString text = QString::fromUtf8(buffer, static_cast<qsizetype>(size));
  std::free(buffer);
  return text;
}

}  // namespace tandem::test
