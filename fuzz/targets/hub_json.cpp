// The Hub's JSON answers: a page of a repository's file tree, and the model search.
#include <exception>
#include <string>

#include "engine/hub/file_listing.h"
#include "engine/hub/model_search.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  try {
    (void)tandem::hub::parse_tree_page(body);
  } catch (const std::exception&) {
  }
  try {
    (void)tandem::hub::parse_model_search(body);
  } catch (const std::exception&) {
  }
  return 0;
}
