// The attention kernel against the straightforward double-precision version.
#include <QtTest>
#include <random>

#include "kernels/cpu/attention.h"

using namespace tandem::kernels;

class TestAttention : public QObject {
  Q_OBJECT
 private slots:
  void matchesReference_data() {
    QTest::addColumn<int>("len");
    QTest::addColumn<int>("dim");
    for (int len : {1, 5, 63, 64, 65, 200})
      for (int dim : {16, 64, 100, 128})
        QTest::newRow(qPrintable(QStringLiteral("len %1 dim %2").arg(len).arg(dim))) << len << dim;
  }

  void matchesReference() {
    QFETCH(int, len);
    QFETCH(int, dim);
    std::mt19937 rng(static_cast<unsigned>(len * 1000 + dim));
    std::normal_distribution<float> d(0.0f, 1.0f);
    const int stride = len + 7, vstride = dim + 3;
    std::vector<float> q(dim), keys(static_cast<std::size_t>(dim * stride)),
        values(static_cast<std::size_t>(len * vstride));
    for (float& x : q) x = d(rng);
    for (float& x : keys) x = d(rng);
    for (float& x : values) x = d(rng);
    std::vector<float> s1(len), s2(len), o1(dim), o2(dim);
    attend_head(q.data(), keys.data(), stride, values.data(), vstride, len, dim, 0.125f, s1.data(),
                o1.data());
    attend_head_reference(q.data(), keys.data(), stride, values.data(), vstride, len, dim, 0.125f,
                          s2.data(), o2.data());
    for (int i = 0; i < dim; ++i)
      QVERIFY2(std::abs(o1[i] - o2[i]) < 1e-5f,
               qPrintable(QStringLiteral("%1 vs %2").arg(o1[i]).arg(o2[i])));
  }
};

QTEST_GUILESS_MAIN(TestAttention)
#include "tst_attention.moc"
