#include "engine/hub/content_digest.h"

#include <openssl/evp.h>

#include <cassert>
#include <stdexcept>
#include <string>

namespace tandem::hub {

struct ContentDigest::Context {
  EVP_MD_CTX* md = nullptr;
  ~Context() { EVP_MD_CTX_free(md); }
};

ContentDigest::ContentDigest(DigestKind kind, std::uint64_t content_size)
    : kind_(kind), context_(std::make_unique<Context>()) {
  context_->md = EVP_MD_CTX_new();
  const EVP_MD* algorithm = kind == DigestKind::Sha256 ? EVP_sha256() : EVP_sha1();
  if (context_->md == nullptr || EVP_DigestInit_ex(context_->md, algorithm, nullptr) != 1) {
    throw std::runtime_error("OpenSSL could not start a digest (out of memory?)");
  }
  if (kind == DigestKind::GitBlobSha1) {
    const std::string header = "blob " + std::to_string(content_size);
    update(header.c_str(), header.size() + 1);  // the header ends with a NUL byte
  }
}

ContentDigest::~ContentDigest() = default;

void ContentDigest::update(const void* data, std::size_t size) {
  assert(context_->md != nullptr && "update after hex()");
  EVP_DigestUpdate(context_->md, data, size);
}

std::string ContentDigest::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(context_->md, digest, &length);
  EVP_MD_CTX_free(context_->md);
  context_->md = nullptr;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(length * 2);
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  ContentDigest d(DigestKind::Sha256, bytes.size());
  d.update(bytes);
  return d.hex();
}

std::string git_blob_sha1_hex(std::string_view bytes) {
  ContentDigest d(DigestKind::GitBlobSha1, bytes.size());
  d.update(bytes);
  return d.hex();
}

}  // namespace tandem::hub
