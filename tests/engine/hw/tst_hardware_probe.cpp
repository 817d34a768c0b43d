// The hardware probe: topology against sysconf, memory against /proc/meminfo, the JSON
// document against its published schema, the no-GPU path, and the recommendations for
// recorded machines.
#include <hwloc.h>
#include <sched.h>
#include <unistd.h>

#include <QFile>
#include <QTemporaryDir>
#include <QtTest>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/hw/hardware_report.h"
#include "engine/hw/report_json.h"
#include "engine/hw/report_table.h"

using namespace tandem;
using nlohmann::json;

namespace {

// Checks `value` against the subset of JSON Schema that docs/detect.schema.json uses
// (type, enum, minimum, required, properties, items, additionalProperties, local $ref).
// Returns the first violation as "path: problem", or an empty string.
std::string validate(const json& value, const json& schema, const json& root,
                     const std::string& path) {
  if (schema.contains("$ref")) {
    std::string ref = schema["$ref"].get<std::string>();
    const std::string prefix = "#/$defs/";
    if (ref.rfind(prefix, 0) != 0) return path + ": unsupported $ref " + ref;
    return validate(value, root["$defs"][ref.substr(prefix.size())], root, path);
  }
  if (schema.contains("type")) {
    std::vector<std::string> types;
    if (schema["type"].is_array())
      types = schema["type"].get<std::vector<std::string>>();
    else
      types.push_back(schema["type"].get<std::string>());
    bool ok = false;
    for (const std::string& t : types) {
      ok = ok || (t == "object" && value.is_object()) || (t == "array" && value.is_array()) ||
           (t == "string" && value.is_string()) || (t == "boolean" && value.is_boolean()) ||
           (t == "integer" && value.is_number_integer()) || (t == "number" && value.is_number()) ||
           (t == "null" && value.is_null());
    }
    if (!ok)
      return path + ": has type " + value.type_name() + ", schema wants " + schema["type"].dump();
  }
  if (schema.contains("enum")) {
    bool found = false;
    for (const json& e : schema["enum"]) found = found || e == value;
    if (!found) return path + ": " + value.dump() + " is not one of " + schema["enum"].dump();
  }
  if (schema.contains("minimum") && value.is_number() &&
      value.get<double>() < schema["minimum"].get<double>()) {
    return path + ": below the minimum";
  }
  if (value.is_object()) {
    for (const json& key : schema.value("required", json::array())) {
      if (!value.contains(key.get<std::string>()))
        return path + ": lacks required " + key.get<std::string>();
    }
    const json props = schema.value("properties", json::object());
    for (auto it = value.begin(); it != value.end(); ++it) {
      const std::string child = path + "." + it.key();
      if (props.contains(it.key())) {
        if (auto e = validate(it.value(), props[it.key()], root, child); !e.empty()) return e;
      } else if (schema.contains("additionalProperties")) {
        const json& extra = schema["additionalProperties"];
        if (extra.is_boolean() && !extra.get<bool>()) return child + ": not in the schema";
        if (extra.is_object()) {
          if (auto e = validate(it.value(), extra, root, child); !e.empty()) return e;
        }
      }
    }
  }
  if (value.is_array() && schema.contains("items")) {
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (auto e = validate(value[i], schema["items"], root, path + "[" + std::to_string(i) + "]");
          !e.empty()) {
        return e;
      }
    }
  }
  return {};
}

json loadSchema() {
  std::ifstream in(TANDEM_SOURCE_DIR "/docs/detect.schema.json");
  return json::parse(in);
}

hw::HardwareReport probeWithoutGpu() {
  hw::ProbeOptions options;
  options.disk_path = QDir::tempPath().toStdString();
  options.query_gpus = false;
  return hw::probe_hardware(options);
}

hw::Topology recordedTopology(int packages, int coresPerPackage, int threadsPerCore) {
  hw::Topology t;
  t.packages = packages;
  t.physical_cores = packages * coresPerPackage;
  t.hardware_threads = t.physical_cores * threadsPerCore;
  int cpu = 0;
  for (int p = 0; p < packages; ++p) {
    hw::NumaNode n;
    n.os_index = p;
    for (int i = 0; i < coresPerPackage * threadsPerCore; ++i) n.cpus.push_back(cpu++);
    n.physical_cores = coresPerPackage;
    n.memory_bytes = 256ull << 30;
    t.numa_nodes.push_back(n);
  }
  return t;
}

kernels::IsaReport recordedIsa(bool avx512, bool amx, bool amxPermitted) {
  kernels::IsaReport r;
  r.identity = {"GenuineIntel", "Recorded CPU", 6, 143, 8};
  kernels::IsaFeatures& f = r.cpuid;
  f.sse42 = f.avx = f.avx2 = f.fma = f.f16c = f.bmi2 = true;
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512_vnni = f.avx512_bf16 = avx512;
  f.amx_tile = f.amx_int8 = f.amx_bf16 = amx;
  r.os_avx = true;
  r.os_avx512 = avx512;
  r.os_amx = amx;
  r.amx_permission =
      amx ? (amxPermitted ? kernels::AmxPermission::Granted : kernels::AmxPermission::Denied)
          : kernels::AmxPermission::NotSupported;
  if (amx && !amxPermitted) r.amx_detail = "Linux refused";
  r.usable = kernels::usable_features(f, true, avx512, amx, amxPermitted);
  return r;
}

}  // namespace

class TestHardwareProbe : public QObject {
  Q_OBJECT
 private slots:
  void topologyAgreesWithSysconf() {
    const hw::Topology t = hw::probe_topology();
    QVERIFY2(t.error.empty(), t.error.c_str());
    cpu_set_t set;
    CPU_ZERO(&set);
    QCOMPARE(sched_getaffinity(0, sizeof set, &set), 0);
    // hwloc keeps the hardware threads this process may run on, as sched_getaffinity does.
    QCOMPARE(t.hardware_threads, CPU_COUNT(&set));
    QVERIFY(t.hardware_threads <= sysconf(_SC_NPROCESSORS_ONLN));
    QVERIFY(t.physical_cores >= 1 && t.physical_cores <= t.hardware_threads);
    QVERIFY(t.packages >= 1 && t.packages <= t.physical_cores);
    QVERIFY(!t.numa_nodes.empty());
    int cpus = 0, cores = 0;
    for (const hw::NumaNode& n : t.numa_nodes) {
      cpus += static_cast<int>(n.cpus.size());
      cores += n.physical_cores;
      for (int c : n.cpus) QVERIFY(CPU_ISSET(c, &set));
    }
    QCOMPARE(cpus, t.hardware_threads);
    QCOMPARE(cores, t.physical_cores);
    // Linux publishes the cache sizes too; hwloc must report the same L2.
    QFile l2(QStringLiteral("/sys/devices/system/cpu/cpu0/cache/index2/size"));
    if (l2.open(QIODevice::ReadOnly)) {
      const QByteArray text = l2.readAll().trimmed();
      QVERIFY(text.endsWith('K'));
      QCOMPARE(t.l2_cache_bytes, text.chopped(1).toULongLong() * 1024);
    }
  }

  void memoryAgreesWithSysconf() {
    const hw::MemoryInfo m = hw::probe_memory();
    QVERIFY2(m.error.empty(), m.error.c_str());
    const double pages_bytes = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    QVERIFY(std::abs(double(m.total_bytes) - pages_bytes) / pages_bytes < 0.01);
    QVERIFY(m.available_bytes > 0 && m.available_bytes <= m.total_bytes);
  }

  void meminfoParsing() {
    const hw::MemoryInfo m =
        hw::parse_meminfo("MemTotal:       16384 kB\nMemFree: 100 kB\nMemAvailable:    8192 kB\n");
    QCOMPARE(m.total_bytes, 16384ull * 1024);
    QCOMPARE(m.available_bytes, 8192ull * 1024);
    QVERIFY(m.error.empty());
    QVERIFY(!hw::parse_meminfo("garbage\n").error.empty());
  }

  void diskSpaceOfMissingFolderUsesParent() {
    QTemporaryDir dir;
    const hw::DiskSpace d = hw::probe_disk_space((dir.path() + "/not/yet/created").toStdString());
    QVERIFY2(d.error.empty(), d.error.c_str());
    QCOMPARE(QString::fromStdString(d.measured_path), dir.path());
    QVERIFY(d.total_bytes > 0);
    QVERIFY(d.free_bytes <= d.total_bytes);
  }

  // This machine has no NVIDIA driver; the answer is an empty list and a reason in words,
  // never a crash or an exception.
  void noGpuPath() {
    const kernels::cuda::DeviceQuery q = kernels::cuda::query_devices();
    QCOMPARE(q.compiled, TANDEM_HAVE_CUDA != 0);
    if (QFile::exists(QStringLiteral("/dev/nvidiactl")) && TANDEM_HAVE_CUDA) {
      // A machine with a driver: either devices, or a sentence saying why there are none.
      QVERIFY(!q.devices.empty() || !q.reason.empty());
      for (const auto& d : q.devices) QVERIFY(d.usable || !d.not_usable.empty());
      return;
    }
    QVERIFY(q.devices.empty());
    QVERIFY(!q.reason.empty());
    QCOMPARE(q.driver_version, 0);
    hw::HardwareReport r = probeWithoutGpu();
    r.gpus = q;
    r.findings = hw::explain(r);
    bool said = false;
    for (const hw::Finding& f : r.findings) {
      said = said || (f.topic == "gpu" && f.headline == "No GPU: everything runs on the CPU");
      // RAM's finding speaks of no GPU it does not have.
      if (f.topic == "memory")
        QVERIFY2(f.detail.rfind("Without a GPU the whole model is kept in RAM", 0) == 0,
                 f.detail.c_str());
    }
    QVERIFY(said);
    // With a usable GPU it says what the GPU leaves to RAM.
    hw::HardwareReport with_gpu = r;
    kernels::cuda::DeviceInfo d;
    d.name = "NVIDIA H200";
    d.usable = true;
    d.total_bytes = d.free_bytes = std::uint64_t{140} << 30;
    with_gpu.gpus.devices = {d};
    bool on_gpu = false;
    for (const hw::Finding& f : hw::explain(with_gpu))
      on_gpu =
          on_gpu || (f.topic == "memory" &&
                     f.detail.find("do not fit on the GPU are kept in RAM") != std::string::npos);
    QVERIFY(on_gpu);
    const json j = hw::to_json(r);
    QVERIFY(j["gpus"]["devices"].empty());
    QVERIFY(j["gpus"]["reason"].is_string());
  }

  void discoveryErrorsInWords() {
#if TANDEM_HAVE_CUDA
    // cudaErrorInsufficientDriver (35) and cudaErrorNoDevice (100).
    QVERIFY(QString::fromStdString(
                kernels::cuda::describe_discovery_error(35, "cudaErrorInsufficientDriver"))
                .contains(QLatin1String("driver")));
    QCOMPARE(kernels::cuda::describe_discovery_error(100, "cudaErrorNoDevice"),
             std::string("no NVIDIA GPU was found"));
#endif
    QVERIFY(QString::fromStdString(kernels::cuda::describe_discovery_error(999, "cudaErrorUnknown"))
                .contains(QLatin1String("999")));
  }

  void jsonFollowsSchema() {
    const json schema = loadSchema();
    const json doc = hw::to_json(probeWithoutGpu());
    const std::string problem = validate(doc, schema, schema, "$");
    QVERIFY2(problem.empty(), problem.c_str());
    QCOMPARE(doc["schema_version"].get<int>(), hw::kDetectSchemaVersion);

    // The validator itself must catch violations, or the test above proves nothing.
    json broken = doc;
    broken["cpu"].erase("brand");
    QVERIFY(!validate(broken, schema, schema, "$").empty());
    broken = doc;
    broken["recommendation"]["cpu_backend"]["value"] = "sse";
    QVERIFY(!validate(broken, schema, schema, "$").empty());
    broken = doc;
    broken["cpu"]["features"]["avx2"] = "yes";
    QVERIFY(!validate(broken, schema, schema, "$").empty());
  }

  void jsonAgreesWithReport() {
    const hw::HardwareReport r = probeWithoutGpu();
    const json j = hw::to_json(r);
    QCOMPARE(j["topology"]["physical_cores"].get<int>(), r.topology.physical_cores);
    QCOMPARE(j["cpu"]["features"]["avx2"].get<bool>(), r.isa.usable.avx2);
    QCOMPARE(j["memory"]["total_bytes"].get<std::uint64_t>(), r.memory.total_bytes);
    QCOMPARE(j["recommendation"]["cpu_threads"]["value"].get<int>(), r.topology.physical_cores);
  }

  void tableNamesEverySection() {
    const QString table = QString::fromStdString(hw::format_report_table(probeWithoutGpu()));
    for (const char* heading : {"CPU\n", "Topology\n", "Memory\n", "GPUs\n", "Disk\n",
                                "Recommended\n", "What this means\n"}) {
      QVERIFY2(table.contains(QLatin1String(heading)), heading);
    }
  }

  // A GPU's measured speeds are shown with it, in the table and the JSON.
  void measuredGpuSpeedsAreReported() {
    hw::HardwareReport r = probeWithoutGpu();
    kernels::cuda::DeviceInfo gpu;
    gpu.name = "NVIDIA H200";
    gpu.compute_major = 9;
    gpu.usable = true;
    gpu.host_to_device_bytes_per_s = 52.4e9;
    gpu.memory_bytes_per_s = 4.3e12;
    gpu.bf16_flops_per_s = 310e12;
    r.gpus.devices = {gpu};
    const QString table = QString::fromStdString(hw::format_report_table(r));
    QVERIFY2(table.contains(QLatin1String(
                 "measured: 52.4 GB/s from the host, 4300 GB/s memory, 310 TFLOP/s BF16")),
             qPrintable(table));
    const json j = hw::to_json(r);
    QCOMPARE(j["gpus"]["devices"][0]["measured"]["host_to_device_bytes_per_s"].get<double>(),
             52.4e9);
    r.gpus.devices[0].host_to_device_bytes_per_s = 0;
    QVERIFY(hw::to_json(r)["gpus"]["devices"][0]["measured"].is_null());
  }

  void recommendationsForRecordedMachines_data() {
    QTest::addColumn<bool>("avx512");
    QTest::addColumn<bool>("amx");
    QTest::addColumn<bool>("amxPermitted");
    QTest::addColumn<int>("packages");
    QTest::addColumn<int>("coresPerPackage");
    QTest::addColumn<int>("threadsPerCore");
    QTest::addColumn<QString>("backend");
    QTest::addColumn<int>("threads");
    QTest::addColumn<int>("pools");
    QTest::newRow("2-socket Xeon with AMX")
        << true << true << true << 2 << 56 << 2 << "amx_int8" << 112 << 2;
    QTest::newRow("AMX refused by the kernel")
        << true << true << false << 1 << 32 << 2 << "avx512_vnni" << 32 << 1;
    QTest::newRow("Ryzen with AVX-512")
        << true << false << false << 1 << 16 << 2 << "avx512_vnni" << 16 << 1;
    QTest::newRow("AVX2 laptop") << false << false << false << 1 << 8 << 2 << "avx2" << 8 << 1;
  }

  void recommendationsForRecordedMachines() {
    QFETCH(bool, avx512);
    QFETCH(bool, amx);
    QFETCH(bool, amxPermitted);
    QFETCH(int, packages);
    QFETCH(int, coresPerPackage);
    QFETCH(int, threadsPerCore);
    QFETCH(QString, backend);
    QFETCH(int, threads);
    QFETCH(int, pools);
    const hw::Recommendation r =
        hw::recommend(recordedIsa(avx512, amx, amxPermitted),
                      recordedTopology(packages, coresPerPackage, threadsPerCore));
    QCOMPARE(QString::fromUtf8(hw::backend_id(r.cpu_backend.value).data()), backend);
    QCOMPARE(r.cpu_threads.value, threads);
    QCOMPARE(r.thread_pools.value, pools);
    QVERIFY(!r.cpu_backend.reason.empty() && !r.cpu_threads.reason.empty() &&
            !r.thread_pools.reason.empty());
  }

  void findingsSpeakPlainly() {
    hw::HardwareReport r;
    r.isa = recordedIsa(true, true, true);
    r.topology = recordedTopology(1, 8, 1);
    r.gpus.reason = "no NVIDIA GPU was found";
    r.recommendation = hw::recommend(r.isa, r.topology);
    r.findings = hw::explain(r);
    QStringList headlines;
    for (const hw::Finding& f : r.findings) headlines << QString::fromStdString(f.headline);
    QVERIFY(headlines.contains(QLatin1String("AMX found: the fastest CPU backend is available")));
    QVERIFY(headlines.contains(QLatin1String("1 NUMA node: one thread pool")));
    QVERIFY(headlines.contains(QLatin1String("No GPU: everything runs on the CPU")));
  }

  void formatBytes() {
    QCOMPARE(hw::format_bytes(512), std::string("512 B"));
    QCOMPARE(hw::format_bytes(1536), std::string("1.5 KiB"));
    QCOMPARE(hw::format_bytes(24ull << 30), std::string("24.0 GiB"));
  }
};

QTEST_GUILESS_MAIN(TestHardwareProbe)
#include "tst_hardware_probe.moc"
