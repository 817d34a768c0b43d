// The GPU speeds are measured once per GPU and driver, then read from the cache file; a
// measurement that fails is not cached, and GPUs Tandem cannot use are not measured.
#include <QtTest>

#include <QTemporaryDir>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/hw/gpu_speeds_cache.h"

using namespace tandem;
using kernels::cuda::DeviceQuery;
using kernels::cuda::GpuSpeeds;

namespace {

DeviceQuery two_gpus() {
  DeviceQuery q;
  q.compiled = true;
  q.driver_version = 13000;
  kernels::cuda::DeviceInfo a;
  a.index = 0;
  a.name = "NVIDIA H200";
  a.pci_bus_id = "0000:01:00.0";
  a.total_bytes = 150'000'000'000ull;
  a.usable = true;
  kernels::cuda::DeviceInfo b = a;
  b.index = 1;
  b.name = "Tesla K80";
  b.pci_bus_id = "0000:02:00.0";
  b.usable = false;
  b.not_usable = "compute capability 3.7 is older than this build supports";
  q.devices = {a, b};
  return q;
}

}  // namespace

class TestGpuSpeedsCache : public QObject {
  Q_OBJECT

 private slots:
  void measuredOnceThenRead() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("tandem/gpu-speeds.json").toStdString();
    std::vector<int> measured;
    const auto measure = [&](int device, GpuSpeeds& s, std::string&) {
      measured.push_back(device);
      s.host_to_device_bytes_per_s = 25.5e9;
      s.memory_bytes_per_s = 4.3e12;
      s.bf16_flops_per_s = 300e12;
      return true;
    };
    DeviceQuery first = two_gpus();
    hw::attach_gpu_speeds(first, path, measure);
    QCOMPARE(measured, std::vector<int>{0});  // the unusable GPU is not measured
    QCOMPARE(first.devices[0].host_to_device_bytes_per_s, 25.5e9);
    QCOMPARE(first.devices[0].bf16_flops_per_s, 300e12);
    QCOMPARE(first.devices[1].host_to_device_bytes_per_s, 0.0);
    QVERIFY(QFile::exists(QString::fromStdString(path)));
    QVERIFY(!QFile::exists(QString::fromStdString(path + ".part")));

    DeviceQuery second = two_gpus();
    hw::attach_gpu_speeds(second, path, measure);
    QCOMPARE(measured.size(), std::size_t{1});  // read, not measured again
    QCOMPARE(second.devices[0].memory_bytes_per_s, 4.3e12);

    // A new driver may change the speeds: measured again, both kept.
    DeviceQuery updated = two_gpus();
    updated.driver_version = 13010;
    hw::attach_gpu_speeds(updated, path, measure);
    QCOMPARE(measured.size(), std::size_t{2});
    std::ifstream in(path);
    QCOMPARE(nlohmann::json::parse(in).size(), std::size_t{2});
  }

  void aFailedMeasurementIsNotKept() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("gpu-speeds.json").toStdString();
    int calls = 0;
    const auto fail = [&](int, GpuSpeeds&, std::string& error) {
      ++calls;
      error = "out of memory";
      return false;
    };
    DeviceQuery q = two_gpus();
    hw::attach_gpu_speeds(q, path, fail);
    QCOMPARE(q.devices[0].host_to_device_bytes_per_s, 0.0);
    QVERIFY(!QFile::exists(QString::fromStdString(path)));
    hw::attach_gpu_speeds(q, path, fail);
    QCOMPARE(calls, 2);
  }

  void aDamagedCacheIsMeasuredAgain() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("gpu-speeds.json").toStdString();
    std::ofstream(path) << "{ not json";
    int calls = 0;
    DeviceQuery q = two_gpus();
    hw::attach_gpu_speeds(q, path, [&](int, GpuSpeeds& s, std::string&) {
      ++calls;
      s.host_to_device_bytes_per_s = 1e9;
      return true;
    });
    QCOMPARE(calls, 1);
    std::ifstream in(path);
    QVERIFY(nlohmann::json::parse(in).is_object());
  }

  void noUsableGpuMeasuresNothing() {
    DeviceQuery q;
    q.reason = "no NVIDIA GPU was found";
    hw::attach_gpu_speeds(q, "/nonexistent/folder/gpu-speeds.json",
                          [](int, GpuSpeeds&, std::string&) -> bool {
                            qFatal("nothing should be measured");
                            return false;
                          });
  }
};

QTEST_GUILESS_MAIN(TestGpuSpeedsCache)
#include "tst_gpu_speeds_cache.moc"
