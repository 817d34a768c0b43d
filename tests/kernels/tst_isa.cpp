// The ISA probe agrees with what Linux reports in /proc/cpuinfo, and variant selection
// follows the documented preference order.
#include <QFile>
#include <QSet>
#include <QtTest>

#include "kernels/cpu/isa.h"

using namespace tandem::kernels;

namespace {

QSet<QString> cpuinfoFlags() {
  QFile f(QStringLiteral("/proc/cpuinfo"));
  if (!f.open(QIODevice::ReadOnly)) return {};
  const QString text = QString::fromLatin1(f.readAll());
  for (const QString& line : text.split(QLatin1Char('\n'))) {
    if (line.startsWith(QLatin1String("flags"))) {
      const QString list = line.section(QLatin1Char(':'), 1);
      const QStringList flags = list.split(QLatin1Char(' '), Qt::SkipEmptyParts);
      return QSet<QString>(flags.begin(), flags.end());
    }
  }
  return {};
}

}  // namespace

class TestIsa : public QObject {
  Q_OBJECT
 private slots:
  void featuresMatchProcCpuinfo_data() {
    QTest::addColumn<int>("index");
    for (std::size_t i = 0; i < kIsaFeatureTable.size(); ++i) {
      QTest::newRow(std::string(kIsaFeatureTable[i].name).c_str()) << static_cast<int>(i);
    }
  }

  // Linux lists a flag only when the CPU has it and the kernel enabled its state, which is
  // the "usable" answer. AMX is usable after the permission request, which Linux grants to
  // every process on kernels that list amx_tile.
  void featuresMatchProcCpuinfo() {
    QFETCH(int, index);
    const QSet<QString> flags = cpuinfoFlags();
    QVERIFY2(!flags.isEmpty(), "/proc/cpuinfo has no flags line");
    const IsaFeatureInfo& info = kIsaFeatureTable[static_cast<std::size_t>(index)];
    const bool listed = flags.contains(
        QString::fromUtf8(info.cpuinfo_flag.data(), static_cast<int>(info.cpuinfo_flag.size())));
    QCOMPARE(detect_isa().usable.*(info.member), listed);
  }

  void identityIsRead() {
    const IsaReport& r = detect_isa();
    QVERIFY(r.identity.vendor == "GenuineIntel" || r.identity.vendor == "AuthenticAMD" ||
            !r.identity.vendor.empty());
    QVERIFY(r.identity.family > 0);
  }

  void usableRequiresOsSupport() {
    IsaFeatures all;
    for (const auto& info : kIsaFeatureTable) all.*(info.member) = true;
    const IsaFeatures noAvxState = usable_features(all, false, false, false, false);
    QVERIFY(noAvxState.sse42);
    QVERIFY(!noAvxState.avx2);
    QVERIFY(!noAvxState.avx512f);
    QVERIFY(!noAvxState.amx_int8);
    const IsaFeatures noZmm = usable_features(all, true, false, true, true);
    QVERIFY(noZmm.avx2);
    QVERIFY(!noZmm.avx512_vnni);
    const IsaFeatures amxDenied = usable_features(all, true, true, true, false);
    QVERIFY(amxDenied.avx512_vnni);
    QVERIFY(!amxDenied.amx_tile);
    const IsaFeatures everything = usable_features(all, true, true, true, true);
    QVERIFY(everything.amx_int8 && everything.amx_bf16);
  }

  void bestVariantOrder() {
    IsaFeatures f;
    QCOMPARE(best_variant(f), CpuVariant::Scalar);
    f.avx = f.avx2 = f.fma = f.f16c = true;
    QCOMPARE(best_variant(f), CpuVariant::Avx2);
    f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = true;
    QCOMPARE(best_variant(f), CpuVariant::Avx2);  // VNNI is required for the INT8 kernels
    f.avx512_vnni = true;
    QCOMPARE(best_variant(f), CpuVariant::Avx2);  // BMI2 is required for the IQ products
    f.bmi2 = true;
    QCOMPARE(best_variant(f), CpuVariant::Avx512);
    f.amx_tile = f.amx_int8 = true;
    QCOMPARE(best_variant(f), CpuVariant::Avx512);  // the BF16 tiles are needed too
    f.amx_bf16 = true;
    QCOMPARE(best_variant(f), CpuVariant::Amx);
  }

  void variantNamesRoundTrip() {
    for (CpuVariant v :
         {CpuVariant::Scalar, CpuVariant::Avx2, CpuVariant::Avx512, CpuVariant::Amx}) {
      CpuVariant parsed = CpuVariant::Scalar;
      QVERIFY(parse_variant(variant_name(v), parsed));
      QCOMPARE(parsed, v);
    }
    CpuVariant unused;
    QVERIFY(!parse_variant("sse9", unused));
  }

  void forcedVariant() {
    qputenv("TANDEM_CPU_VARIANT", "scalar");
    QCOMPARE(active_variant(), CpuVariant::Scalar);
    qputenv("TANDEM_CPU_VARIANT", "nonsense");
    QVERIFY_THROWS_EXCEPTION(std::runtime_error, active_variant());
    const CpuVariant best = best_variant(detect_isa().usable);
    if (best != CpuVariant::Amx) {
      qputenv("TANDEM_CPU_VARIANT", "amx");
      try {
        active_variant();
        QFAIL("forcing an unsupported variant must throw");
      } catch (const std::runtime_error& e) {
        QVERIFY(QString::fromUtf8(e.what()).contains(QLatin1String("does not have")));
      }
    }
    qunsetenv("TANDEM_CPU_VARIANT");
    QCOMPARE(active_variant(), best);
  }
};

QTEST_GUILESS_MAIN(TestIsa)
#include "tst_isa.moc"
