// Binding through hwloc: a thread bound to a core runs only there; memory bound to a NUMA
// node has its pages there. Where the system cannot bind, both fall back harmlessly: the
// thread stays as it was and the memory is ordinary, usable memory.
#include <QtTest>

#include <cstring>
#include <thread>

#include "engine/hw/binding.h"
#include "engine/hw/topology.h"

using namespace tandem;

class TestBinding : public QObject {
  Q_OBJECT
 private slots:
  void threadOnOneCore() {
    const hw::Topology topology = hw::probe_topology();
    const std::vector<int> allowed = hw::this_thread_cpus();
    QVERIFY(!allowed.empty());
    const std::vector<int> core = topology.numa_nodes.back().cores.back();
    bool bound = false;
    std::vector<int> after;
    std::thread([&] {
      bound = hw::bind_this_thread(core);
      after = hw::this_thread_cpus();
    }).join();
    QCOMPARE(after, bound ? core : allowed);
    // Nothing to bind to is refused, and changes nothing.
    std::thread([&] {
      bound = hw::bind_this_thread({});
      after = hw::this_thread_cpus();
    }).join();
    QVERIFY(!bound);
    QCOMPARE(after, allowed);
    QCOMPARE(hw::this_thread_cpus(), allowed);  // the test's own thread was never touched
  }

  void memoryOnEachNode() {
    for (const hw::NumaNode& node : hw::probe_topology().numa_nodes) {
      constexpr std::size_t kBytes = 3 << 20;
      hw::NodeMemory memory(kBytes, {node.os_index});
      QVERIFY(memory.data() != nullptr);
      QCOMPARE(memory.size(), kBytes);
      QCOMPARE(reinterpret_cast<std::uintptr_t>(memory.data()) % 4096, std::uintptr_t{0});
      std::memset(memory.data(), 0x5a, kBytes);  // pages are placed as they are written
      if (memory.bound()) {
        QCOMPARE(hw::memory_nodes(memory.data(), kBytes), std::vector<int>{node.os_index});
      }
      hw::NodeMemory moved = std::move(memory);
      QVERIFY(memory.data() == nullptr);
      QCOMPARE(moved.data()[kBytes - 1], std::uint8_t{0x5a});
    }
    QVERIFY(hw::NodeMemory().data() == nullptr);
  }
};

QTEST_GUILESS_MAIN(TestBinding)
#include "tst_binding.moc"
