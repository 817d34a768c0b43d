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

  // Several query heads over one key/value head, as grouped-query and latent attention call
  // it: each query's result equals the reference for that query alone.
  void groupedHeadsMatchReference_data() {
    QTest::addColumn<int>("nq");
    QTest::addColumn<int>("len");
    QTest::addColumn<int>("dim");
    for (int nq : {1, 3, 8, 12, 16})
      for (int len : {1, 15, 16, 17, 100})
        for (int dim : {8, 40, 64, 128})
          QTest::newRow(qPrintable(QStringLiteral("nq %1 len %2 dim %3").arg(nq).arg(len).arg(dim)))
              << nq << len << dim;
  }

  void groupedHeadsMatchReference() {
    QFETCH(int, nq);
    QFETCH(int, len);
    QFETCH(int, dim);
    std::mt19937 rng(static_cast<unsigned>(nq * 7919 + len * 1000 + dim));
    std::normal_distribution<float> d(0.0f, 1.0f);
    const int stride = len + 5, vstride = dim + 9;
    std::vector<float> q(static_cast<std::size_t>(nq * dim)),
        keys(static_cast<std::size_t>(dim * stride)),
        values(static_cast<std::size_t>(len * vstride));
    for (float& x : q) x = d(rng);
    for (float& x : keys) x = d(rng);
    for (float& x : values) x = d(rng);
    std::vector<float> scores(static_cast<std::size_t>(nq * len)),
        out(static_cast<std::size_t>(nq * dim));
    attend_heads(q.data(), nq, keys.data(), stride, values.data(), vstride, len, dim, 0.125f,
                 scores.data(), out.data());
    std::vector<float> s2(len), o2(dim);
    for (int i = 0; i < nq; ++i) {
      attend_head_reference(q.data() + i * dim, keys.data(), stride, values.data(), vstride, len,
                            dim, 0.125f, s2.data(), o2.data());
      for (int j = 0; j < dim; ++j)
        QVERIFY2(std::abs(out[static_cast<std::size_t>(i * dim + j)] - o2[j]) < 1e-5f,
                 qPrintable(QStringLiteral("query %1 dim %2: %3 vs %4")
                                .arg(i)
                                .arg(j)
                                .arg(out[static_cast<std::size_t>(i * dim + j)])
                                .arg(o2[j])));
    }
  }

  // gpt-oss's attention sinks: each head's sink logit joins the denominator only, so the
  // weights sum to less than one, by the sink's share.
  void sinksJoinTheDenominator() {
    for (int len : {1, 17, 70}) {
      const int nq = 3, dim = 40, stride = len + 3, vstride = dim;
      std::mt19937 rng(static_cast<unsigned>(len));
      std::normal_distribution<float> d(0.0f, 1.0f);
      std::vector<float> q(static_cast<std::size_t>(nq * dim)),
          keys(static_cast<std::size_t>(dim * stride)),
          values(static_cast<std::size_t>(len * vstride), 1.0f);  // all ones: out = sum of p
      for (float& x : q) x = d(rng);
      for (float& x : keys) x = d(rng);
      const std::vector<float> sinks = {-1.0f, 2.0f, 9.0f};
      std::vector<float> scores(static_cast<std::size_t>(nq * len)),
          out(static_cast<std::size_t>(nq * dim));
      attend_heads(q.data(), nq, keys.data(), stride, values.data(), vstride, len, dim, 0.125f,
                   scores.data(), out.data(), sinks.data());
      std::vector<float> s2(static_cast<std::size_t>(len)), o2(dim);
      for (int i = 0; i < nq; ++i) {
        attend_head_reference(q.data() + i * dim, keys.data(), stride, values.data(), vstride, len,
                              dim, 0.125f, s2.data(), o2.data(), sinks[i]);
        double sum = 0, scored = 0;
        for (int s = 0; s < len; ++s) {
          double dot = 0;
          for (int j = 0; j < dim; ++j) dot += q[i * dim + j] * keys[j * stride + s];
          scored += std::exp(0.125 * dot);
        }
        sum = scored / (scored + std::exp(double(sinks[i])));
        QVERIFY2(std::abs(o2[0] - sum) < 1e-5,
                 qPrintable(QStringLiteral("%1 vs %2").arg(o2[0]).arg(sum)));
        for (int j = 0; j < dim; ++j)
          QVERIFY(std::abs(out[static_cast<std::size_t>(i * dim + j)] - o2[j]) < 1e-5f);
      }
      QVERIFY(out[2 * dim] < out[0]);  // the largest sink takes the most
    }
  }

  // The vectorised exponential in softmax against double precision, over the range softmax
  // sees (0 down to far below float's smallest normal) and lengths with and without a tail.
  void softmaxMatchesDouble() {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> spread(-120.0f, 3.0f);
    for (int n : {1, 15, 16, 17, 64, 1000}) {
      std::vector<float> x(static_cast<std::size_t>(n));
      for (float& v : x) v = spread(rng);
      x[0] = 3.0f;  // the maximum, so most values are far below it
      std::vector<double> want(x.size()), tolerance(x.size());
      double sum = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        sum += want[i] = std::exp(double(x[i]) - 3.0);
        // x - max is rounded to float first: e^x inherits a relative error of |x - max| ulp.
        tolerance[i] = 1e-6 + 1.2e-7 * std::abs(double(x[i]) - 3.0);
      }
      softmax_inplace(x.data(), n);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double expected = want[i] / sum;
        QVERIFY2(std::abs(x[i] - expected) <= tolerance[i] * expected + 1e-37,
                 qPrintable(
                     QStringLiteral("n %1 at %2: %3 vs %4").arg(n).arg(i).arg(x[i]).arg(expected)));
      }
    }
  }

  // Keys and values of different widths, as latent attention uses them (scores over the
  // latent and the rotary key, the latent alone weighed): against double precision.
  void splitKeyAndValueWidths() {
    const int nq = 12, len = 37, key_dim = 40, value_dim = 32;
    std::mt19937 rng(77);
    std::normal_distribution<float> d(0.0f, 1.0f);
    const int stride = len + 3, vstride = value_dim + 5;
    std::vector<float> q(static_cast<std::size_t>(nq * key_dim)),
        keys(static_cast<std::size_t>(key_dim * stride)),
        values(static_cast<std::size_t>(len * vstride));
    for (float& x : q) x = d(rng);
    for (float& x : keys) x = d(rng);
    for (float& x : values) x = d(rng);
    std::vector<float> scores(static_cast<std::size_t>(nq * len)),
        out(static_cast<std::size_t>(nq * value_dim));
    attend_heads_split(q.data(), nq, keys.data(), stride, key_dim, values.data(), vstride,
                       value_dim, len, 0.2f, scores.data(), out.data());
    for (int i = 0; i < nq; ++i) {
      std::vector<double> p(len);
      double mx = -1e300, sum = 0;
      for (int s = 0; s < len; ++s) {
        double dot = 0;
        for (int k = 0; k < key_dim; ++k) dot += double(q[i * key_dim + k]) * keys[k * stride + s];
        p[s] = dot * 0.2;
        mx = std::max(mx, p[s]);
      }
      for (int s = 0; s < len; ++s) sum += p[s] = std::exp(p[s] - mx);
      for (int v = 0; v < value_dim; ++v) {
        double want = 0;
        for (int s = 0; s < len; ++s) want += p[s] / sum * values[s * vstride + v];
        QVERIFY2(std::abs(out[i * value_dim + v] - want) < 1e-5,
                 qPrintable(QStringLiteral("query %1 value %2: %3 vs %4")
                                .arg(i)
                                .arg(v)
                                .arg(out[i * value_dim + v])
                                .arg(want)));
      }
    }
  }
};

QTEST_GUILESS_MAIN(TestAttention)
#include "tst_attention.moc"
