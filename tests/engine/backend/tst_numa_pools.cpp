// The thread pools: where threads and pools go on a machine (one pool per NUMA node, the
// cores split evenly when there are more pools than nodes), every index of every job run
// exactly once on every pool, thousands of times over without a deadlock, and workers
// pinned to distinct cores (or, where the system cannot pin, left as they were).
#include <QtTest>

#include <atomic>
#include <latch>
#include <mutex>
#include <set>
#include <thread>

#include "engine/backend/cpu/numa_pools.h"
#include "engine/hw/binding.h"
#include "engine/hw/topology.h"

using namespace tandem;

namespace {

// A machine of `nodes` NUMA nodes with `cores` cores each, two hardware threads per core:
// core c of node n has hardware threads 2c and 2c + 1 counted over the whole machine.
hw::Topology machine(const std::vector<int>& cores_per_node) {
  hw::Topology t;
  int cpu = 0;
  for (std::size_t n = 0; n < cores_per_node.size(); ++n) {
    hw::NumaNode node;
    node.os_index = static_cast<int>(n);
    for (int c = 0; c < cores_per_node[n]; ++c) {
      node.cores.push_back({cpu, cpu + 1});
      node.cpus.insert(node.cpus.end(), {cpu, cpu + 1});
      cpu += 2;
    }
    node.physical_cores = cores_per_node[n];
    t.physical_cores += cores_per_node[n];
    t.numa_nodes.push_back(node);
  }
  t.hardware_threads = cpu;
  return t;
}

using Cpus = std::vector<int>;

// What each worker of `pool` is bound to, asked from inside a task. Each of the `workers`
// tasks waits until all have started, so each worker runs exactly one.
std::vector<Cpus> worker_bindings(backend::ThreadPool& pool) {
  const int workers = pool.workers();
  std::vector<Cpus> out;
  std::mutex lock;
  std::latch started(workers);
  const backend::ThreadPool::Body body = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      {
        const std::lock_guard guard(lock);
        out.push_back(hw::this_thread_cpus());
      }
      started.arrive_and_wait();
    }
  };
  pool.submit(workers, 1, body);
  pool.wait();
  return out;
}

}  // namespace

class TestNumaPools : public QObject {
  Q_OBJECT
 private slots:
  void placement_data() {
    QTest::addColumn<std::vector<int>>("coresPerNode");
    QTest::addColumn<int>("threads");
    QTest::addColumn<int>("pools");
    QTest::addColumn<std::vector<int>>("threadsPerPool");
    QTest::addColumn<std::vector<int>>("firstNodeOfPool");
    QTest::newRow("2 nodes, 2 pools")
        << std::vector<int>{4, 4} << 8 << 2 << std::vector<int>{4, 4} << std::vector<int>{0, 1};
    QTest::newRow("uneven nodes") << std::vector<int>{6, 2} << 4 << 2 << std::vector<int>{3, 1}
                                  << std::vector<int>{0, 1};
    QTest::newRow("4 nodes, 2 pools") << std::vector<int>{2, 2, 2, 2} << 8 << 2
                                      << std::vector<int>{4, 4} << std::vector<int>{0, 2};
    QTest::newRow("1 node, 2 pools")
        << std::vector<int>{2} << 2 << 2 << std::vector<int>{1, 1} << std::vector<int>{0, 0};
    QTest::newRow("1 node, 4 pools")
        << std::vector<int>{8} << 8 << 4 << std::vector<int>{2, 2, 2, 2}
        << std::vector<int>{0, 0, 0, 0};
    QTest::newRow("fewer threads than pools")
        << std::vector<int>{2} << 1 << 2 << std::vector<int>{1, 0} << std::vector<int>{0, 0};
    QTest::newRow("more threads than cores")
        << std::vector<int>{2} << 5 << 1 << std::vector<int>{5} << std::vector<int>{0};
  }

  void placement() {
    QFETCH(std::vector<int>, coresPerNode);
    QFETCH(int, threads);
    QFETCH(int, pools);
    QFETCH(std::vector<int>, threadsPerPool);
    QFETCH(std::vector<int>, firstNodeOfPool);
    const hw::Topology topology = machine(coresPerNode);
    const auto placed = hw::place_pools(topology, threads, pools);
    QCOMPARE(placed.size(), static_cast<std::size_t>(pools));
    const int cores = topology.physical_cores;
    std::set<Cpus> pinned;
    for (std::size_t p = 0; p < placed.size(); ++p) {
      QCOMPARE(static_cast<int>(placed[p].thread_cpus.size()), threadsPerPool[p]);
      QVERIFY(!placed[p].numa_nodes.empty());
      QCOMPARE(placed[p].numa_nodes.front(), firstNodeOfPool[p]);
      for (std::size_t t = 0; t < placed[p].thread_cpus.size(); ++t) {
        const Cpus& cpus = placed[p].thread_cpus[t];
        if (p == 0 && t == 0) {
          QVERIFY(cpus.empty());  // the caller is never pinned
          continue;
        }
        if (threads <= cores) {
          // One core each, on the pool's own nodes, no core twice; pool 0's first core is
          // left to the caller.
          QCOMPARE(cpus.size(), std::size_t(2));
          QCOMPARE(cpus[1], cpus[0] + 1);
          QVERIFY(pinned.insert(cpus).second);
          QVERIFY((cpus != Cpus{0, 1}));
          const int node = [&] {
            for (const hw::NumaNode& n : topology.numa_nodes) {
              if (std::find(n.cpus.begin(), n.cpus.end(), cpus[0]) != n.cpus.end())
                return n.os_index;
            }
            return -1;
          }();
          QVERIFY(std::find(placed[p].numa_nodes.begin(), placed[p].numa_nodes.end(), node) !=
                  placed[p].numa_nodes.end());
        } else {
          QCOMPARE(static_cast<int>(cpus.size()), 2 * cores);  // all the pool's cores
        }
      }
    }
    QCOMPARE(hw::pool_numa_nodes(topology, pools).size(), static_cast<std::size_t>(pools));
  }

  void defaultPoolCountIsTheNodesWithCores() {
    QCOMPARE(hw::default_pool_count(machine({4, 4})), 2);
    hw::Topology memory_only = machine({4});
    memory_only.numa_nodes.push_back({});  // a node with memory and no cores (CXL, HBM)
    memory_only.numa_nodes.back().os_index = 1;
    QCOMPARE(hw::default_pool_count(memory_only), 1);
  }

  void everyIndexRunsOncePerPool_data() {
    QTest::addColumn<int>("threads");
    QTest::addColumn<int>("pools");
    for (int pools = 1; pools <= 4; ++pools) {
      for (int threads : std::set<int>{1, 2, pools, pools + 3}) {
        QTest::addRow("%d threads, %d pools", threads, pools) << threads << pools;
      }
    }
  }

  // Thousands of jobs of both kinds, of changing sizes: each index is run exactly once (per
  // pool, for the per-pool jobs). A lost wake-up or a missed last chunk would hang or miscount.
  void everyIndexRunsOncePerPool() {
    QFETCH(int, threads);
    QFETCH(int, pools);
    backend::NumaPools set(threads, pools, /*pin=*/false);
    QCOMPARE(set.pools(), pools);
    QCOMPARE(set.threads(), threads);
    constexpr int kMaxN = 97;
    std::vector<std::atomic<int>> runs(static_cast<std::size_t>(pools * kMaxN));
    for (int round = 0; round < 3000; ++round) {
      const std::int64_t n = 1 + round % kMaxN;
      const std::int64_t chunk = round % 6;  // 0: guided
      for (auto& r : runs) r.store(0, std::memory_order_relaxed);
      if (round % 2 == 0) {
        set.parallel_for_each_pool(n, chunk, [&](int pool, std::int64_t begin, std::int64_t end) {
          for (std::int64_t i = begin; i < end; ++i)
            runs[static_cast<std::size_t>(pool * kMaxN + i)].fetch_add(1);
        });
        for (int p = 0; p < pools; ++p) {
          for (std::int64_t i = 0; i < n; ++i) {
            if (runs[static_cast<std::size_t>(p * kMaxN + i)].load() != 1)
              QFAIL(qPrintable(QStringLiteral("round %1: pool %2 ran index %3 %4 times")
                                   .arg(round)
                                   .arg(p)
                                   .arg(i)
                                   .arg(runs[static_cast<std::size_t>(p * kMaxN + i)].load())));
          }
        }
      } else {
        set.parallel_for(n, chunk, [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t i = begin; i < end; ++i) runs[static_cast<std::size_t>(i)].fetch_add(1);
        });
        for (std::int64_t i = 0; i < n; ++i) {
          if (runs[static_cast<std::size_t>(i)].load() != 1)
            QFAIL(qPrintable(QStringLiteral("round %1: index %2 ran %3 times")
                                 .arg(round)
                                 .arg(i)
                                 .arg(runs[static_cast<std::size_t>(i)].load())));
        }
      }
    }
  }

  // Guided chunks cover the loop once, in order, each a 1/(2 * threads) share of what is left
  // (at least one item), so they shrink to single items at the end.
  void guidedChunksShrinkToSingleItems() {
    for (int threads : {1, 2, 3, 8, 64}) {
      for (std::int64_t n : {1, 2, 7, 64, 97, 2374}) {
        backend::LoopCounter counter;
        counter.reset(n, 0, threads);
        std::int64_t begin = 0, end = 0, expected_begin = 0, last_size = n;
        int claims = 0;
        while (counter.claim(begin, end)) {
          QCOMPARE(begin, expected_begin);
          const std::int64_t size = end - begin;
          QCOMPARE(size, std::max<std::int64_t>(1, (n - begin) / (2 * threads)));
          QVERIFY(size <= last_size);
          last_size = size;
          expected_begin = end;
          ++claims;
        }
        QCOMPARE(expected_begin, n);
        QCOMPARE(last_size, std::int64_t{1});
        if (n >= 64 * threads) QVERIFY(claims < n / 4);  // far fewer claims than items
      }
    }
    backend::LoopCounter fixed;
    fixed.reset(10, 4, 2);
    std::int64_t begin = 0, end = 0;
    std::vector<std::int64_t> ends;
    while (fixed.claim(begin, end)) ends.push_back(end);
    QCOMPARE(ends, (std::vector<std::int64_t>{4, 8, 10}));
  }

  // The pools work on their slices at the same time: a job whose every pool waits for all
  // the others finishes only if none runs after another.
  void poolsRunAtTheSameTime() {
    for (int pools = 2; pools <= 4; ++pools) {
      backend::NumaPools set(pools, pools, /*pin=*/false);
      std::latch all(pools);
      set.parallel_for_each_pool(1, 1,
                                 [&](int, std::int64_t, std::int64_t) { all.arrive_and_wait(); });
    }
  }

  // A pool without workers (fewer threads than pools) runs its part on the caller.
  void aPoolWithoutThreadsRunsOnTheCaller() {
    backend::NumaPools set(1, 2, /*pin=*/false);
    QCOMPARE(set.pool(1).workers(), 0);
    std::vector<std::thread::id> ran(2);
    set.parallel_for_each_pool(1, 1, [&](int pool, std::int64_t, std::int64_t) {
      ran[static_cast<std::size_t>(pool)] = std::this_thread::get_id();
    });
    QCOMPARE(ran[0], std::this_thread::get_id());
    QCOMPARE(ran[1], std::this_thread::get_id());
  }

  // One thread per physical core: each worker is bound to its own core, none to the core
  // left for the caller, and the caller is not touched. Where the system cannot pin (the log says
  // so once), every worker is left with what the process may use: the documented fallback.
  void workersArePinnedToDistinctCores_data() {
    QTest::addColumn<int>("pools");
    QTest::newRow("1 pool") << 1;
    QTest::newRow("2 pools") << 2;
  }

  void workersArePinnedToDistinctCores() {
    QFETCH(int, pools);
    const hw::Topology topology = hw::probe_topology();
    const Cpus caller_before = hw::this_thread_cpus();
    // Whether this system pins at all, tried on a thread of our own.
    bool can_pin = false;
    std::thread([&] {
      can_pin = hw::bind_this_thread({caller_before.back()}) &&
                hw::this_thread_cpus() == Cpus{caller_before.back()};
    }).join();
    // One thread per core; at least one per pool, which then share cores.
    const int threads = std::max(topology.physical_cores, pools);
    const bool core_each = threads <= topology.physical_cores;
    backend::NumaPools set(threads, pools);
    std::set<Cpus> seen;
    int workers = 0;
    for (int p = 0; p < set.pools(); ++p) {
      const std::vector<Cpus> bound = worker_bindings(set.pool(p));
      QCOMPARE(static_cast<int>(bound.size()), set.pool(p).workers());
      // Worker i of pool 0 runs thread slot i + 1 (slot 0 is the caller); in other pools, slot i.
      const auto& planned = set.placement()[static_cast<std::size_t>(p)].thread_cpus;
      for (const Cpus& cpus : bound) {
        ++workers;
        if (can_pin) {
          QVERIFY2(std::find(planned.begin(), planned.end(), cpus) != planned.end(),
                   "a worker is bound to something not planned for its pool");
          if (core_each) {
            QVERIFY2(seen.insert(cpus).second, "two workers share a core");
            QVERIFY(cpus != topology.numa_nodes.front().cores.front());  // the caller's core
          }
        } else {
          QCOMPARE(cpus, caller_before);
        }
      }
    }
    QCOMPARE(workers, threads - 1);
    QCOMPARE(hw::this_thread_cpus(), caller_before);
  }
};

QTEST_GUILESS_MAIN(TestNumaPools)
#include "tst_numa_pools.moc"
