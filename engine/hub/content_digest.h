// The digests the Hub publishes for a file: sha256 of the content for LFS files, and the
// git blob id (sha1 over "blob SIZE\0" + content) for files stored in git itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace tandem::hub {

enum class DigestKind { Sha256, GitBlobSha1 };

// Incremental digest over OpenSSL's libcrypto. `content_size` is only used by the git blob
// kind, whose header states the size before any content.
class ContentDigest {
 public:
  ContentDigest(DigestKind kind, std::uint64_t content_size);
  ~ContentDigest();
  ContentDigest(const ContentDigest&) = delete;
  ContentDigest& operator=(const ContentDigest&) = delete;

  void update(const void* data, std::size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  // Lower-case hex; the digest cannot be updated afterwards.
  std::string hex();

  DigestKind kind() const { return kind_; }

 private:
  struct Context;
  DigestKind kind_;
  std::unique_ptr<Context> context_;
};

std::string sha256_hex(std::string_view bytes);
std::string git_blob_sha1_hex(std::string_view bytes);

}  // namespace tandem::hub
