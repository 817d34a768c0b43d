// The KV caches take transparent huge pages: map_huge's mappings start on a huge page and are
// advised for them, and HugePageAllocator maps a vector of a huge page or more, as the kernel
// sees them in /proc/self/smaps.
#include <sys/mman.h>
#include <unistd.h>

#include <QFile>
#include <QtTest>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/huge_pages.h"

using namespace tandem::kernels;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// The smaps entry of the mapping that holds `p`: its VmFlags line, or empty where no mapping
// holds it.
QByteArray flags_of_mapping(const void* p) {
  QFile f(QStringLiteral("/proc/self/smaps"));
  if (!f.open(QIODevice::ReadOnly)) return {};
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  for (const QByteArray& line : f.readAll().split('\n')) {
    const int dash = line.indexOf('-'), space = line.indexOf(' ');
    if (dash > 0 && space > dash) {  // a mapping's first line: "begin-end perms ..."
      bool ok1 = false, ok2 = false;
      const std::uintptr_t begin = line.left(dash).toULongLong(&ok1, 16);
      const std::uintptr_t end = line.mid(dash + 1, space - dash - 1).toULongLong(&ok2, 16);
      if (ok1 && ok2) {
        inside = at >= begin && at < end;
        continue;
      }
    }
    if (inside && line.startsWith("VmFlags:")) return line;
  }
  return {};
}

// Whether any mapping holds `p`'s page: mincore(2) fails on a page none does, and allocates
// nothing that could take the address in between.
bool mapped(const void* p) {
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  unsigned char in = 0;
  return mincore(reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(p) / page * page), 1,
                 &in) == 0;
}

// Whether the kernel marks the mapping advised for huge pages ("hg").
bool advised(const void* p) {
  return flags_of_mapping(p).contains(" hg");
}

// A kernel without transparent huge pages refuses the advice; the memory is ordinary there.
bool kernel_has_huge_pages() {
  return QFile::exists(QStringLiteral("/sys/kernel/mm/transparent_hugepage/enabled"));
}

bool on_huge_page(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % kHugePage == 0;
}

}  // namespace

class TestHugePages : public QObject {
  Q_OBJECT
 private slots:
  void mappedMemoryStartsOnAHugePageZeroedAndAdvised() {
    const std::size_t bytes = 3 * kMiB + 5;
    auto* p = static_cast<unsigned char*>(map_huge(bytes));
    QVERIFY(on_huge_page(p));
    for (std::size_t i = 0; i < bytes; i += 4093) QCOMPARE(p[i], 0);
    QCOMPARE(p[bytes - 1], 0);
    std::memset(p, 7, bytes);
    if (kernel_has_huge_pages()) {
      QVERIFY2(advised(p), flags_of_mapping(p).constData());
      QVERIFY(advised(p + bytes - 1));
    }
    unmap_huge(p, bytes);
    QVERIFY(!mapped(p));
  }

  // KvCache's rows: a vector of a huge page or more is mapped; a smaller one is not.
  void vectorsOfAHugePageAreMapped() {
    std::vector<std::uint16_t, HugePageAllocator<std::uint16_t>> big(2 * kMiB, 5), small(100, 5);
    QCOMPARE(big[2 * kMiB - 1], 5);
    QVERIFY(!advised(small.data()));
    if (!kHugePagesInUse) return;
    QVERIFY(on_huge_page(big.data()));
    if (kernel_has_huge_pages()) QVERIFY(advised(big.data()));
    const std::uint16_t* p = big.data();
    big = {};
    big.shrink_to_fit();
    QVERIFY(!mapped(p));
  }
};

QTEST_GUILESS_MAIN(TestHugePages)
#include "tst_huge_pages.moc"
