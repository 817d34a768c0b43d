// The attention kernels against a straightforward double-precision version: grouped
// queries, ranges that start inside a key tile (sliding windows), keys and values of
// different widths (latent attention), sinks, and a context split into parts and combined
// (decoding across threads) equal to the whole; a prompt's attention taken a block of keys at
// a time (flash-style); and the same over a BF16 cache in every variant the CPU has (and the
// AMX prompt kernel with its tile unit emulated, wherever AVX-512 BF16 runs).
#include <QtTest>
#include <functional>
#include <random>

#include "kernels/cpu/attention/attention.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/isa.h"

using namespace tandem::kernels;

namespace tandem::kernels::testing {  // exp16_builds.cpp
void exp16_avx512(const float* x, float* y, std::int64_t n);
void exp16_portable(const float* x, float* y, std::int64_t n);
}  // namespace tandem::kernels::testing

namespace {

struct Case {
  int nq, key_dim, value_dim, len, vstride;
  std::vector<float> q, keys, values;  // keys tiled, for `len` positions
};

Case make_case(int nq, int key_dim, int value_dim, int len, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  Case c{nq, key_dim, value_dim, len, value_dim + 5, {}, {}, {}};
  c.q.resize(static_cast<std::size_t>(nq * key_dim));
  c.keys.resize(tiled_key_floats(len, key_dim));
  c.values.resize(static_cast<std::size_t>(len * c.vstride));
  for (float& x : c.q) x = d(rng);
  for (float& x : c.keys) x = d(rng);  // the tile's unused tail too: it must not count
  for (float& x : c.values) x = d(rng);
  return c;
}

// Query i's attention over [begin, end) in double precision, straight from the definition.
// The softmax weights of query q (key_dim values) over positions [begin, end) of tiled keys,
// with the sink, in double precision, straight from the definition.
std::vector<double> weights(const float* q, const std::vector<float>& keys, int key_dim, int begin,
                            int end, double scale, double sink) {
  std::vector<double> p(static_cast<std::size_t>(end - begin));
  double mx = sink;
  for (int s = begin; s < end; ++s) {
    double dot = 0;
    for (int k = 0; k < key_dim; ++k) dot += double(q[k]) * keys[tiled_key_index(s, k, key_dim)];
    p[static_cast<std::size_t>(s - begin)] = dot * scale;
    mx = std::max(mx, dot * scale);
  }
  double sum = std::exp(sink - mx);
  for (double& x : p) sum += x = std::exp(x - mx);
  for (double& x : p) x /= sum;
  return p;
}

// Query i's attention over [begin, end) in double precision.
std::vector<double> expected(const Case& c, int i, int begin, int end, double scale,
                             double sink = -INFINITY) {
  const std::vector<double> p =
      weights(c.q.data() + i * c.key_dim, c.keys, c.key_dim, begin, end, scale, sink);
  std::vector<double> out(static_cast<std::size_t>(c.value_dim), 0.0);
  for (int s = begin; s < end; ++s)
    for (int v = 0; v < c.value_dim; ++v)
      out[static_cast<std::size_t>(v)] += p[static_cast<std::size_t>(s - begin)] *
                                          c.values[static_cast<std::size_t>(s * c.vstride + v)];
  return out;
}

// Within 1e-5, relative to values above 1 (fp32 sums in another order; a latent attention's
// 576 dimensions put some outputs at 2 and more).
bool close(const float* got, const std::vector<double>& want, QString* why) {
  for (std::size_t v = 0; v < want.size(); ++v) {
    if (std::abs(got[v] - want[v]) > 1e-5 * std::max(1.0, std::abs(want[v]))) {
      *why = QStringLiteral("value %1: %2 vs %3").arg(v).arg(got[v]).arg(want[v]);
      return false;
    }
  }
  return true;
}

// The case's keys and values in a BF16 cache whose rows hold other heads' values around this
// one's (it starts at column kColumn of rows of value_dim + 6), and the queries as the
// kernels round them.
struct Bf16Case {
  static constexpr int kColumn = 3;
  std::vector<std::uint16_t> keys, values;
  std::vector<float> q;     // rounded to BF16
  std::vector<float> k, v;  // the cache's values as floats: k tiled as in Case, v [len][value_dim]
  Bf16Kv kv;
};

Bf16Case to_bf16(const Case& c) {
  Bf16Case b;
  const int row = c.value_dim + 6;
  b.keys.assign(tiled_key_floats(c.len, c.key_dim), 0);
  b.values.assign(bf16_value_elements(c.len, row), 0);
  b.k.assign(tiled_key_floats(c.len, c.key_dim), 0.0f);
  b.v.assign(static_cast<std::size_t>(c.len * c.value_dim), 0.0f);
  std::mt19937 rng(5);
  for (auto& x : b.values) x = f32_to_bf16(std::normal_distribution<float>(0.0f, 1.0f)(rng));
  for (int s = 0; s < c.len; ++s) {
    for (int d = 0; d < c.key_dim; ++d) {
      const std::uint16_t x = f32_to_bf16(c.keys[tiled_key_index(s, d, c.key_dim)]);
      b.keys[bf16_key_index(s, d, c.key_dim)] = x;
      b.k[tiled_key_index(s, d, c.key_dim)] = bf16_to_f32(x);
    }
    for (int d = 0; d < c.value_dim; ++d) {
      const std::uint16_t x = f32_to_bf16(c.values[static_cast<std::size_t>(s * c.vstride + d)]);
      b.values[bf16_value_index(s, Bf16Case::kColumn + d, row)] = x;
      b.v[static_cast<std::size_t>(s * c.value_dim + d)] = bf16_to_f32(x);
    }
  }
  for (float x : c.q) b.q.push_back(bf16_to_f32(f32_to_bf16(x)));
  b.kv = Bf16Kv{b.keys.data(), c.key_dim,
                b.values.data() + bf16_value_index(0, Bf16Case::kColumn, row), row, c.value_dim};
  return b;
}

// Query i's attention over [begin, end) of the BF16 cache in double precision (the rounded
// query, the exact weights), and for each value the error the kernels may make: the weights
// are rounded to BF16 (half a unit in the 8th bit) before they weigh, and fp32 sums the rest.
void expected_bf16(const Case& c, const Bf16Case& b, int i, int begin, int end, double scale,
                   double sink, std::vector<double>& out, std::vector<double>& bound) {
  const std::vector<double> p =
      weights(b.q.data() + i * c.key_dim, b.k, c.key_dim, begin, end, scale, sink);
  out.assign(static_cast<std::size_t>(c.value_dim), 0.0);
  bound.assign(out.size(), 2e-6);
  for (int s = begin; s < end; ++s) {
    for (int d = 0; d < c.value_dim; ++d) {
      const double w = p[static_cast<std::size_t>(s - begin)];
      const double v = b.v[static_cast<std::size_t>(s * c.value_dim + d)];
      out[static_cast<std::size_t>(d)] += w * v;
      bound[static_cast<std::size_t>(d)] +=
          std::ldexp(w * std::abs(v), -8) + 1e-6 * w * std::abs(v);
    }
  }
}

bool within(const float* got, const std::vector<double>& want, const std::vector<double>& bound,
            QString* why) {
  for (std::size_t d = 0; d < want.size(); ++d) {
    if (!(std::abs(got[d] - want[d]) <= bound[d])) {
      *why = QStringLiteral("value %1: %2 vs %3 (allowed %4)")
                 .arg(d)
                 .arg(got[d])
                 .arg(want[d])
                 .arg(bound[d]);
      return false;
    }
  }
  return true;
}

// The fp32 cache's variants: Portable (its clones) and, where the CPU has AVX2, Avx2.
std::vector<AttentionVariant> fp32_variants() {
  std::vector<AttentionVariant> v{AttentionVariant::Portable};
  if (attention_variant_supported(AttentionVariant::Avx2)) v.push_back(AttentionVariant::Avx2);
  return v;
}

std::vector<AttentionVariant> bf16_variants() {
  std::vector<AttentionVariant> v{AttentionVariant::Portable};
  if (attention_variant_supported(AttentionVariant::Avx2)) v.push_back(AttentionVariant::Avx2);
  if (attention_variant_supported(AttentionVariant::Avx512Bf16))
    v.push_back(AttentionVariant::Avx512Bf16);
  if (attention_variant_supported(AttentionVariant::AmxBf16))
    v.push_back(AttentionVariant::AmxBf16);
  return v;
}

// Not an AttentionVariant: AmxBf16's prompt kernel with the tile unit emulated in software,
// which runs wherever Avx512Bf16 does.
constexpr int kEmulatedAmx = 100;
// Prompt variants over the 8-bit cache: kInt8Variants + the AttentionVariant.
constexpr int kInt8Variants = 200;

// The case's keys and values in an 8-bit cache (a capacity past its length, as the engine's),
// what they stand for as floats, and the queries as the kernels quantise them.
struct Int8Case {
  std::vector<std::uint8_t> keys;
  std::vector<float> key_scales, value_scales;
  std::vector<std::int8_t> values;
  std::vector<float> q;     // q8 * scale per row
  std::vector<float> k, v;  // k tiled as in Case, v [len][value_dim]
  std::vector<int> v8;      // the value bytes, [len][value_dim]
  Int8Kv kv;
};

Int8Case to_int8(const Case& c) {
  Int8Case b;
  const int capacity = c.len + 40;
  const std::int64_t stride = int8_value_scale_stride(capacity);
  b.keys.assign(tiled_key_floats(capacity, c.key_dim), 0);
  b.key_scales.assign(int8_key_scales(capacity, c.key_dim), 0.0f);
  b.values.assign(int8_value_elements(capacity, c.value_dim), 0);
  b.value_scales.assign(int8_value_scales(stride, c.value_dim), 0.0f);
  b.k.assign(tiled_key_floats(c.len, c.key_dim), 0.0f);
  b.v.assign(static_cast<std::size_t>(c.len * c.value_dim), 0.0f);
  b.v8.assign(b.v.size(), 0);
  std::vector<float> row(static_cast<std::size_t>(std::max(c.key_dim, c.value_dim)));
  for (int s = 0; s < c.len; ++s) {
    for (int d = 0; d < c.key_dim; ++d) row[d] = c.keys[tiled_key_index(s, d, c.key_dim)];
    int8_store_key(b.keys.data(), b.key_scales.data(), s, c.key_dim, row.data());
    for (int d = 0; d < c.key_dim; ++d)
      b.k[tiled_key_index(s, d, c.key_dim)] =
          (b.keys[int8_key_index(s, d, c.key_dim)] - 128) *
          b.key_scales[int8_key_scale_index(s, d / kInt8Group, c.key_dim)];
    int8_store_value(b.values.data(), b.value_scales.data(), stride, s, c.value_dim,
                     c.values.data() + s * c.vstride);
    for (int d = 0; d < c.value_dim; ++d) {
      const int x = b.values[int8_value_index(s, d, c.value_dim)];
      b.v8[static_cast<std::size_t>(s * c.value_dim + d)] = x;
      b.v[static_cast<std::size_t>(s * c.value_dim + d)] =
          x *
          b.value_scales[static_cast<std::size_t>(d / int8_value_group(c.value_dim) * stride + s)];
    }
  }
  std::vector<std::int8_t> q8(static_cast<std::size_t>(c.key_dim));
  for (int r = 0; r < c.nq; ++r) {
    const float sq = int8_quantize_query(c.q.data() + r * c.key_dim, c.key_dim, q8.data());
    for (std::int8_t x : q8) b.q.push_back(x * sq);
  }
  b.kv =
      Int8Kv{b.keys.data(), b.key_scales.data(), c.key_dim, b.values.data(), b.value_scales.data(),
             stride,        c.value_dim};
  return b;
}

// Query i's attention over [begin, end) of the 8-bit cache in double precision (the quantised
// query, the exact weights), and for each value the error the kernels may make: each chunk
// of kInt8ValueChunk positions (at multiples of it, cut at `cuts`: the parts of a split) rounds
// its weights to bytes, half a step of (its largest weight x its largest value scale) / 255
// times the value's byte; fp32 sums the rest. With `shared_chunks` (a prompt's rows, which
// take a chunk's bytes together with rows of other tokens), the largest value scale is that
// of the chunk's positions in the whole cache.
void expected_int8(const Case& c, const Int8Case& b, int i, int begin, int end, double scale,
                   double sink, std::vector<double>& out, std::vector<double>& bound,
                   const std::vector<int>& cuts = {}, bool shared_chunks = false) {
  const std::vector<double> p =
      weights(b.q.data() + i * c.key_dim, b.k, c.key_dim, begin, end, scale, sink);
  const std::int64_t stride = b.kv.value_scale_stride;
  out.assign(static_cast<std::size_t>(c.value_dim), 0.0);
  bound.assign(out.size(), 1e-5);
  const auto piece_end = [&](int s) {
    int e = std::min(end, (s / int(kInt8ValueChunk) + 1) * int(kInt8ValueChunk));
    for (int cut : cuts)
      if (cut > s) e = std::min(e, cut);
    return e;
  };
  for (int lo = begin; lo < end; lo = piece_end(lo)) {
    const int hi = piece_end(lo);
    double m = 0;
    for (int s = lo; s < hi; ++s) m = std::max(m, p[static_cast<std::size_t>(s - begin)]);
    for (int d = 0; d < c.value_dim; ++d) {
      const std::size_t g = static_cast<std::size_t>(d / int8_value_group(c.value_dim) * stride);
      double largest = 0;
      const int chunk = lo - lo % int(kInt8ValueChunk);
      const int from = shared_chunks ? chunk : lo;
      const int to = shared_chunks ? std::min(c.len, chunk + int(kInt8ValueChunk)) : hi;
      for (int s = from; s < to; ++s) largest = std::max<double>(largest, b.value_scales[g + s]);
      for (int s = lo; s < hi; ++s) {
        const double w = p[static_cast<std::size_t>(s - begin)];
        const std::size_t at = static_cast<std::size_t>(s * c.value_dim + d);
        out[static_cast<std::size_t>(d)] += w * b.v[at];
        bound[static_cast<std::size_t>(d)] +=
            0.5001 * m * largest / 255.0 * std::abs(b.v8[at]) + 1e-5 * w * std::abs(b.v[at]);
      }
    }
  }
}

std::vector<AttentionVariant> int8_variants() {
  std::vector<AttentionVariant> v{AttentionVariant::Portable};
  if (attention_variant_supported(AttentionVariant::Avx2)) v.push_back(AttentionVariant::Avx2);
  const IsaFeatures& u = detect_isa().usable;
  if (u.avx512f && u.avx512bw && u.avx512vl && u.avx512_vnni)
    v.push_back(AttentionVariant::Avx512Bf16);  // any variant past Portable: VPDPBUSD
  return v;
}

// The reduced caches' checks against double precision, whatever the cache: `attend` runs the
// kernel over [begin, c.len) of the case with the sinks (or null) into `out`; `expect` gives
// query i's expected values and their bounds. Sinks: 0.5 i - 1 for query i.
void check_whole(const Case& c, int begin, bool sinks,
                 const std::function<void(const float* sinks, float* scores, float* out)>& attend,
                 const std::function<void(int i, double sink, std::vector<double>& want,
                                          std::vector<double>& bound)>& expect) {
  std::vector<float> sink_logits(static_cast<std::size_t>(c.nq));
  for (int i = 0; i < c.nq; ++i) sink_logits[static_cast<std::size_t>(i)] = 0.5f * i - 1.0f;
  std::vector<float> scores(static_cast<std::size_t>(c.nq * (c.len - begin))),
      out(static_cast<std::size_t>(c.nq * c.value_dim));
  attend(sinks ? sink_logits.data() : nullptr, scores.data(), out.data());
  std::vector<double> want, bound;
  for (int i = 0; i < c.nq; ++i) {
    expect(i, sinks ? sink_logits[static_cast<std::size_t>(i)] : -INFINITY, want, bound);
    QString why;
    QVERIFY2(within(out.data() + i * c.value_dim, want, bound, &why),
             qPrintable(QStringLiteral("query %1, ").arg(i) + why));
  }
}

// The same for a context split into `parts` and combined: `part` runs the kernel's part
// over [b, e); `expect` gets the parts' ends.
void check_parts(
    const Case& c, int begin, int parts,
    const std::function<void(int b, int e, float* scores, float* out, float* max, float* sum)>&
        part,
    const std::function<void(int i, const std::vector<int>& cuts, std::vector<double>& want,
                             std::vector<double>& bound)>& expect,
    const QString& what) {
  const int nq = c.nq, dim = c.value_dim, n = c.len - begin;
  std::vector<float> outs(static_cast<std::size_t>(parts * nq * dim)),
      maxes(static_cast<std::size_t>(parts * nq)), sums(maxes.size()),
      scores(static_cast<std::size_t>(nq * c.len)), out(static_cast<std::size_t>(nq * dim));
  std::vector<int> cuts;
  for (int p = 0; p < parts; ++p) {
    cuts.push_back(begin + n * (p + 1) / parts);
    part(begin + n * p / parts, begin + n * (p + 1) / parts, scores.data(),
         outs.data() + p * nq * dim, maxes.data() + p * nq, sums.data() + p * nq);
  }
  combine_attention_parts(parts, nq, dim, outs.data(), maxes.data(), sums.data(), nullptr,
                          out.data());
  std::vector<double> want, bound;
  for (int i = 0; i < nq; ++i) {
    expect(i, cuts, want, bound);
    QString why;
    QVERIFY2(within(out.data() + i * dim, want, bound, &why),
             qPrintable(what + QStringLiteral(", %1 parts, query %2, ").arg(parts).arg(i) + why));
  }
}

}  // namespace

class TestAttention : public QObject {
  Q_OBJECT
 private slots:
  // Several query heads over one key/value head, as grouped-query and latent attention call
  // it, over ranges that start at 0, inside the first tile, on a tile edge and past it.
  void groupedHeadsMatchReference_data() {
    QTest::addColumn<int>("nq");
    QTest::addColumn<int>("len");
    QTest::addColumn<int>("dim");
    QTest::addColumn<int>("begin");
    for (int nq : {1, 3, 8, 12, 16})
      for (int len : {1, 15, 16, 17, 100, 200})
        for (int dim : {8, 40, 64, 128})
          for (int begin : {0, 3, 16, 17})
            if (begin < len)
              QTest::newRow(qPrintable(QStringLiteral("nq %1 len %2 dim %3 from %4")
                                           .arg(nq)
                                           .arg(len)
                                           .arg(dim)
                                           .arg(begin)))
                  << nq << len << dim << begin;
  }

  void groupedHeadsMatchReference() {
    QFETCH(int, nq);
    QFETCH(int, len);
    QFETCH(int, dim);
    QFETCH(int, begin);
    const Case c =
        make_case(nq, dim, dim, len, static_cast<unsigned>(nq * 7919 + len * 1000 + dim));
    for (AttentionVariant v : fp32_variants()) {
      std::vector<float> scores(static_cast<std::size_t>(nq * (len - begin))),
          out(static_cast<std::size_t>(nq * dim));
      attend_heads(c.q.data(), nq, c.keys.data(), c.values.data(), c.vstride, begin, len, dim,
                   0.125f, scores.data(), out.data(), nullptr, v);
      for (int i = 0; i < nq; ++i) {
        QString why;
        QVERIFY2(close(out.data() + i * dim, expected(c, i, begin, len, 0.125), &why),
                 qPrintable(QStringLiteral("%1, query %2, ").arg(attention_variant_name(v)).arg(i) +
                            why));
      }
    }
  }

  // The double-precision reference the other kernel tests use agrees with the definition.
  void referenceMatchesDefinition() {
    const Case c = make_case(1, 40, 40, 37, 3);
    std::vector<float> scores(37), out(40);
    attend_head_reference(c.q.data(), c.keys.data(), c.values.data(), c.vstride, 37, 40, 0.2f,
                          scores.data(), out.data());
    QString why;
    QVERIFY2(close(out.data(), expected(c, 0, 0, 37, 0.2f), &why), qPrintable(why));
  }

  // gpt-oss's attention sinks: each head's sink logit joins the denominator only, so the
  // weights sum to less than one, by the sink's share.
  void sinksJoinTheDenominator() {
    for (int len : {1, 17, 70}) {
      const int nq = 3, dim = 40;
      Case c = make_case(nq, dim, dim, len, static_cast<unsigned>(len));
      std::fill(c.values.begin(), c.values.end(), 1.0f);  // all ones: out = sum of p
      const std::vector<float> sinks = {-1.0f, 2.0f, 9.0f};
      for (AttentionVariant v : fp32_variants()) {
        std::vector<float> scores(static_cast<std::size_t>(nq * len)),
            out(static_cast<std::size_t>(nq * dim));
        attend_heads(c.q.data(), nq, c.keys.data(), c.values.data(), c.vstride, 0, len, dim, 0.125f,
                     scores.data(), out.data(), sinks.data(), v);
        for (int i = 0; i < nq; ++i) {
          const std::vector<double> want = expected(c, i, 0, len, 0.125, sinks[i]);
          QVERIFY(want[0] < 1.0);
          QString why;
          QVERIFY2(close(out.data() + i * dim, want, &why),
                   qPrintable(QString::fromLatin1(attention_variant_name(v)) + ": " + why));
        }
        QVERIFY(out[2 * dim] < out[0]);  // the largest sink takes the most
      }
    }
  }

  // A context split into parts (threads sharing one head while decoding) and combined is the
  // attention over the whole, with and without sinks, whatever the parts' edges.
  void partsCombineToTheWhole_data() {
    QTest::addColumn<int>("len");
    QTest::addColumn<int>("parts");
    QTest::addColumn<bool>("sinks");
    for (int len : {2, 33, 700})
      for (int parts : {1, 2, 3, 7})
        for (bool sinks : {false, true})
          if (parts <= len)
            QTest::newRow(qPrintable(
                QStringLiteral("len %1 parts %2%3").arg(len).arg(parts).arg(sinks ? " sinks" : "")))
                << len << parts << sinks;
  }

  void partsCombineToTheWhole() {
    QFETCH(int, len);
    QFETCH(int, parts);
    QFETCH(bool, sinks);
    const int nq = 8, dim = 64, begin = 5 % len;
    const Case c = make_case(nq, dim, dim, len, static_cast<unsigned>(len * 31 + parts));
    const std::vector<float> sink_logits = {-1.0f, 0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
    std::vector<float> outs(static_cast<std::size_t>(parts * nq * dim)),
        maxes(static_cast<std::size_t>(parts * nq)), sums(maxes.size()),
        scores(static_cast<std::size_t>(nq * len)), out(static_cast<std::size_t>(nq * dim));
    const int n = len - begin;
    for (AttentionVariant v : fp32_variants()) {
      for (int p = 0; p < parts; ++p) {
        attend_heads_part(c.q.data(), nq, c.keys.data(), dim, c.values.data(), c.vstride, dim,
                          begin + n * p / parts, begin + n * (p + 1) / parts, 0.125f, scores.data(),
                          outs.data() + p * nq * dim, maxes.data() + p * nq, sums.data() + p * nq,
                          v);
      }
      combine_attention_parts(parts, nq, dim, outs.data(), maxes.data(), sums.data(),
                              sinks ? sink_logits.data() : nullptr, out.data());
      for (int i = 0; i < nq; ++i) {
        QString why;
        QVERIFY2(close(out.data() + i * dim,
                       expected(c, i, begin, len, 0.125, sinks ? sink_logits[i] : -INFINITY), &why),
                 qPrintable(QStringLiteral("%1, query %2, ").arg(attention_variant_name(v)).arg(i) +
                            why));
      }
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

  // exp16 as the AVX-512 kernels build it (2^n and the flush by VSCALEFPS) gives the portable
  // path's bits (built with FMA, as its AVX2 and AVX-512 clones are) for every float tried on: a
  // sweep of the bit patterns from -100 to 100, the edges of the flush and the clamp, infinities,
  // zeros and NaN (NaN in both).
  void exp16Avx512MatchesPortable() {
    const IsaFeatures& isa = detect_isa().usable;
    if (!isa.avx512f || !isa.fma)
      QSKIP(
          "needs a CPU with AVX-512F and FMA, which this one lacks: the exp16 under test is the "
          "AVX-512 attention kernels' build");
    std::vector<float> x;
    const auto bits_of = [](float f) {
      std::uint32_t b;
      std::memcpy(&b, &f, 4);
      return b;
    };
    for (std::uint32_t sign : {0u, 0x80000000u})
      for (std::uint32_t b = 0; b <= bits_of(100.0f); b += 251) {
        const std::uint32_t v = sign | b;
        float f;
        std::memcpy(&f, &v, 4);
        x.push_back(f);
      }
    for (float f : {-87.0f, std::nextafter(-87.0f, -100.0f), std::nextafter(-87.0f, 0.0f), 88.0f,
                    std::nextafter(88.0f, 100.0f), 88.7f, 89.0f, -103.0f, -1e30f, 1e30f, -0.0f,
                    0.0f, -INFINITY, INFINITY, NAN, -NAN})
      x.push_back(f);
    while (x.size() % 16 != 0) x.push_back(0.5f);
    std::vector<float> want(x.size()), got(x.size());
    testing::exp16_portable(x.data(), want.data(), static_cast<std::int64_t>(x.size()));
    testing::exp16_avx512(x.data(), got.data(), static_cast<std::int64_t>(x.size()));
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(want[i]) && std::isnan(got[i])) continue;
      if (bits_of(want[i]) != bits_of(got[i]))
        QFAIL(qPrintable(QStringLiteral("e^%1: portable %2, AVX-512 %3")
                             .arg(double(x[i]), 0, 'g', 9)
                             .arg(double(want[i]), 0, 'g', 9)
                             .arg(double(got[i]), 0, 'g', 9)));
    }
    QVERIFY(x.size() > 8000000);
  }

  // The BF16 cache in every variant the CPU has, against double precision over the same
  // BF16 keys and values: grouped queries, ranges from odd and even starts (a pair of
  // positions half outside), lengths that end inside a pair and a tile, widths with a tail
  // past 32 values, keys wider than values (latent attention), with sinks.
  void bf16CacheMatchesReference_data() {
    QTest::addColumn<int>("variant");
    QTest::addColumn<int>("nq");
    QTest::addColumn<int>("len");
    QTest::addColumn<int>("key_dim");
    QTest::addColumn<int>("value_dim");
    QTest::addColumn<int>("begin");
    QTest::addColumn<bool>("sinks");
    for (AttentionVariant v : bf16_variants())
      for (int nq : {1, 3, 8, 12})
        for (int len : {1, 2, 17, 33, 100, 161})
          for (auto [kd, vd] : {std::pair{8, 8}, {40, 40}, {64, 64}, {128, 128}, {72, 64}})
            for (int begin : {0, 1, 16, 17})
              if (begin < len)
                QTest::newRow(qPrintable(QStringLiteral("%1 nq %2 len %3 dims %4/%5 from %6")
                                             .arg(attention_variant_name(v))
                                             .arg(nq)
                                             .arg(len)
                                             .arg(kd)
                                             .arg(vd)
                                             .arg(begin)))
                    << static_cast<int>(v) << nq << len << kd << vd << begin << (len % 2 == 1);
  }

  void bf16CacheMatchesReference() {
    QFETCH(int, variant);
    QFETCH(int, nq);
    QFETCH(int, len);
    QFETCH(int, key_dim);
    QFETCH(int, value_dim);
    QFETCH(int, begin);
    QFETCH(bool, sinks);
    const Case c = make_case(nq, key_dim, value_dim, len,
                             static_cast<unsigned>(nq * 7919 + len * 1000 + key_dim + begin));
    const Bf16Case b = to_bf16(c);
    check_whole(
        c, begin, sinks,
        [&](const float* sk, float* scores, float* out) {
          attend_heads_bf16(c.q.data(), nq, b.kv, begin, len, 0.125f, scores, out, sk,
                            static_cast<AttentionVariant>(variant));
        },
        [&](int i, double sink, std::vector<double>& want, std::vector<double>& bound) {
          expected_bf16(c, b, i, begin, len, 0.125, sink, want, bound);
        });
  }

  // A BF16 cache's context split into parts and combined is the attention over the whole.
  void bf16PartsCombineToTheWhole() {
    for (AttentionVariant v : bf16_variants()) {
      for (int parts : {2, 3, 7}) {
        const int nq = 8, dim = 64, len = 301, begin = 5;
        const Case c = make_case(nq, dim, dim, len, static_cast<unsigned>(parts));
        const Bf16Case b = to_bf16(c);
        check_parts(
            c, begin, parts,
            [&](int lo, int hi, float* scores, float* out, float* max, float* sum) {
              attend_heads_part_bf16(c.q.data(), nq, b.kv, lo, hi, 0.125f, scores, out, max, sum,
                                     v);
            },
            [&](int i, const std::vector<int>&, std::vector<double>& want,
                std::vector<double>& bound) {
              expected_bf16(c, b, i, begin, len, 0.125, -INFINITY, want, bound);
            },
            QString::fromLatin1(attention_variant_name(v)));
      }
    }
  }

  // A prompt's attention, flash-style, against double precision for every token and head:
  // the fp32 cache and the BF16 cache in every variant; jobs that start at position 0 and
  // deep in a context, inside and across key blocks; queries and results with strides of
  // their own; widths with tails; key and value widths apart (latent attention); sliding
  // windows shorter and longer than a block; sinks.
  void promptMatchesReference_data() {
    QTest::addColumn<int>("variant");  // -1 - v: the fp32 cache in variant v; or kEmulatedAmx
    QTest::addColumn<int>("nq");
    QTest::addColumn<int>("tokens");
    QTest::addColumn<int>("pos0");
    QTest::addColumn<int>("key_dim");
    QTest::addColumn<int>("value_dim");
    QTest::addColumn<int>("window");
    std::vector<int> variants;
    for (AttentionVariant v : fp32_variants()) variants.push_back(-1 - static_cast<int>(v));
    for (AttentionVariant v : bf16_variants()) variants.push_back(static_cast<int>(v));
    if (attention_variant_supported(AttentionVariant::Avx512Bf16)) variants.push_back(kEmulatedAmx);
    for (AttentionVariant v : int8_variants())
      variants.push_back(kInt8Variants + static_cast<int>(v));
    struct Shape {
      int nq, tokens, pos0, kd, vd, window;
    };
    const Shape shapes[] = {
        {1, 1, 0, 8, 8, 0},
        {8, 16, 0, 128, 128, 0},
        {8, 16, 300, 128, 128, 0},
        {3, 5, 7, 40, 40, 0},
        {5, 23, 120, 72, 64, 0},
        {12, 7, 250, 64, 64, 0},
        {8, 16, 255, 128, 128, 0},
        {2, 40, 0, 96, 80, 0},
        {8, 16, 200, 128, 128, 50},
        {4, 9, 130, 40, 40, 200},
        {16, 3, 1000, 24, 24, 0},
        {6, 13, 127, 576 / 8, 512 / 8, 0},
        // Tile-sized widths (AMX: whole 32s of keys, 16s of values) with rows that do not
        // fill a last group of 16, and a latent attention's widths.
        {7, 5, 33, 64, 80, 0},
        {8, 5, 140, 576, 512, 0},
        // Few heads, many tokens: the 8-bit cache's row groups take several tokens, across
        // blocks, with a window that ends inside them.
        {3, 70, 100, 64, 64, 90},
        {1, 20, 250, 32, 32, 0},
        {4, 9, 60, 64, 192, 0},  // values with a scale per 96
        // The VDPBF16PS kernel's rows in lanes (48 rows and more, in groups of 48): a last
        // group of one register (16 rows), and a latent attention's widths.
        {8, 8, 40, 64, 64, 0},
        {16, 4, 130, 576, 512, 0},
    };
    const auto name = [](int v) {
      if (v < 0)
        return QStringLiteral("f32 ") +
               attention_variant_name(static_cast<AttentionVariant>(-1 - v));
      if (v == kEmulatedAmx) return QStringLiteral("amx-emulated");
      if (v >= kInt8Variants)
        return QStringLiteral("int8 ") +
               attention_variant_name(static_cast<AttentionVariant>(v - kInt8Variants));
      return QString::fromLatin1(attention_variant_name(static_cast<AttentionVariant>(v)));
    };
    for (int v : variants)
      for (const Shape& s : shapes)
        if (v < kInt8Variants || (s.kd % kInt8Group == 0 && s.vd % kInt8Group == 0))
          QTest::newRow(qPrintable(QStringLiteral("%1 nq %2 tokens %3 from %4 dims %5/%6 window %7")
                                       .arg(name(v))
                                       .arg(s.nq)
                                       .arg(s.tokens)
                                       .arg(s.pos0)
                                       .arg(s.kd)
                                       .arg(s.vd)
                                       .arg(s.window)))
              << v << s.nq << s.tokens << s.pos0 << s.kd << s.vd << s.window;
  }

  void promptMatchesReference() {
    QFETCH(int, variant);
    QFETCH(int, nq);
    QFETCH(int, tokens);
    QFETCH(int, pos0);
    QFETCH(int, key_dim);
    QFETCH(int, value_dim);
    QFETCH(int, window);
    const int len = pos0 + tokens;
    // Row t * nq + i of the case's queries is token t's head i.
    const Case c = make_case(nq * tokens, key_dim, value_dim, len,
                             static_cast<unsigned>(nq * 31 + tokens * 7 + pos0 + key_dim));
    const bool int8 = variant >= kInt8Variants;
    const Bf16Case b = int8 ? Bf16Case{} : to_bf16(c);
    const Int8Case b8 = int8 ? to_int8(c) : Int8Case{};
    std::vector<float> sinks(static_cast<std::size_t>(nq));
    for (int i = 0; i < nq; ++i) sinks[static_cast<std::size_t>(i)] = 0.3f * i - 0.5f;
    const bool with_sinks = tokens % 2 == 1;
    // Strides wider than a token's rows, as the engine's (other KV heads' rows between).
    const int q_stride = (nq + 2) * key_dim, out_stride = (nq + 1) * value_dim;
    std::vector<float> q(static_cast<std::size_t>(tokens * q_stride), 0.0f);
    std::vector<float> out(static_cast<std::size_t>(tokens * out_stride), -7.0f);
    for (int t = 0; t < tokens; ++t)
      std::copy_n(c.q.data() + t * nq * key_dim, nq * key_dim, q.data() + t * q_stride);
    const float scale = 0.15f;
    const float* sk = with_sinks ? sinks.data() : nullptr;
    if (variant < 0) {
      attend_prompt(q.data(), q_stride, nq, tokens, c.keys.data(), key_dim, c.values.data(),
                    c.vstride, value_dim, pos0, window, scale, sk, out.data(), out_stride,
                    static_cast<AttentionVariant>(-1 - variant));
    } else if (int8) {
      attend_prompt_int8(q.data(), q_stride, nq, tokens, b8.kv, pos0, window, scale, sk, out.data(),
                         out_stride, static_cast<AttentionVariant>(variant - kInt8Variants));
    } else if (variant == kEmulatedAmx) {
      attend_prompt_bf16_amx_emulated(q.data(), q_stride, nq, tokens, b.kv, pos0, window, scale, sk,
                                      out.data(), out_stride);
    } else {
      attend_prompt_bf16(q.data(), q_stride, nq, tokens, b.kv, pos0, window, scale, sk, out.data(),
                         out_stride, static_cast<AttentionVariant>(variant));
    }
    for (int t = 0; t < tokens; ++t) {
      const int end = pos0 + t + 1, begin = window > 0 ? std::max(0, end - window) : 0;
      for (int i = 0; i < nq; ++i) {
        const double sink = with_sinks ? sinks[static_cast<std::size_t>(i)] : -INFINITY;
        const float* got = out.data() + t * out_stride + i * value_dim;
        QString why;
        bool ok;
        if (variant < 0) {
          ok = close(got, expected(c, t * nq + i, begin, end, scale, sink), &why);
        } else if (int8) {
          std::vector<double> want, bound;
          expected_int8(c, b8, t * nq + i, begin, end, scale, sink, want, bound, {}, true);
          ok = within(got, want, bound, &why);
        } else {
          std::vector<double> want, bound;
          expected_bf16(c, b, t * nq + i, begin, end, scale, sink, want, bound);
          ok = within(got, want, bound, &why);
        }
        QVERIFY2(ok, qPrintable(QStringLiteral("token %1, head %2: ").arg(t).arg(i) + why));
      }
      // The columns between the token's rows are not the kernel's.
      for (int j = nq * value_dim; j < out_stride; ++j)
        QCOMPARE(out[static_cast<std::size_t>(t * out_stride + j)], -7.0f);
    }
  }

  // The 8-bit cache in every variant the CPU has, against double precision over the same
  // quantised keys, values and queries: grouped queries, ranges from inside a tile and a
  // chunk, lengths that end inside a quad, a tile and a chunk, keys wider than values
  // (latent attention's 576 and 512), with sinks.
  void int8CacheMatchesReference_data() {
    QTest::addColumn<int>("variant");
    QTest::addColumn<int>("nq");
    QTest::addColumn<int>("len");
    QTest::addColumn<int>("key_dim");
    QTest::addColumn<int>("value_dim");
    QTest::addColumn<int>("begin");
    QTest::addColumn<bool>("sinks");
    for (AttentionVariant v : int8_variants())
      for (int nq : {1, 3, 8, 12})
        for (int len : {1, 3, 17, 33, 100, 161})
          // (Values of 192 keep a scale per 96: three groups of 32 to a scale.)
          for (auto [kd, vd] :
               {std::pair{32, 32}, {64, 64}, {128, 128}, {96, 64}, {64, 192}, {576, 512}})
            for (int begin : {0, 1, 16, 35})
              if (begin < len && (kd < 576 || nq == 8) && (vd != 192 || nq == 3))
                QTest::newRow(qPrintable(QStringLiteral("%1 nq %2 len %3 dims %4/%5 from %6")
                                             .arg(attention_variant_name(v))
                                             .arg(nq)
                                             .arg(len)
                                             .arg(kd)
                                             .arg(vd)
                                             .arg(begin)))
                    << static_cast<int>(v) << nq << len << kd << vd << begin << (len % 2 == 1);
  }

  void int8CacheMatchesReference() {
    QFETCH(int, variant);
    QFETCH(int, nq);
    QFETCH(int, len);
    QFETCH(int, key_dim);
    QFETCH(int, value_dim);
    QFETCH(int, begin);
    QFETCH(bool, sinks);
    const Case c = make_case(nq, key_dim, value_dim, len,
                             static_cast<unsigned>(nq * 7919 + len * 1000 + key_dim + begin));
    const Int8Case b = to_int8(c);
    check_whole(
        c, begin, sinks,
        [&](const float* sk, float* scores, float* out) {
          attend_heads_int8(c.q.data(), nq, b.kv, begin, len, 0.125f, scores, out, sk,
                            static_cast<AttentionVariant>(variant));
        },
        [&](int i, double sink, std::vector<double>& want, std::vector<double>& bound) {
          expected_int8(c, b, i, begin, len, 0.125, sink, want, bound);
        });
  }

  // An 8-bit cache's context split into parts and combined is the attention over the whole
  // (each part rounds its own chunks' weights).
  void int8PartsCombineToTheWhole() {
    for (AttentionVariant v : int8_variants()) {
      for (int parts : {2, 3, 7}) {
        const int nq = 8, dim = 128, len = 301, begin = 5;
        const Case c = make_case(nq, dim, dim, len, static_cast<unsigned>(parts));
        const Int8Case b = to_int8(c);
        check_parts(
            c, begin, parts,
            [&](int lo, int hi, float* scores, float* out, float* max, float* sum) {
              attend_heads_part_int8(c.q.data(), nq, b.kv, lo, hi, 0.125f, scores, out, max, sum,
                                     v);
            },
            [&](int i, const std::vector<int>& cuts, std::vector<double>& want,
                std::vector<double>& bound) {
              expected_int8(c, b, i, begin, len, 0.125, -INFINITY, want, bound, cuts);
            },
            QString::fromLatin1(attention_variant_name(v)));
      }
    }
  }

  // Every byte at its extreme: keys, queries and values of +-1 store as key bytes 1 and 255
  // and query and value bytes -127 and 127, so each integer product is the largest it can be
  // (a 16-bit pair sum such as VPMADDUBSW's would saturate on them). Decode whole and in
  // parts, and a prompt's rows, against the reference on the same bytes; 5 and 7 query heads
  // take a full pass of rows and a short one.
  void int8ExtremeBytesMatchReference() {
    for (AttentionVariant v : int8_variants()) {
      for (int nq : {5, 7}) {
        const int dim = 128, len = 150, begin = 3;
        Case c = make_case(nq, dim, dim, len, static_cast<unsigned>(nq));
        for (std::vector<float>* x : {&c.q, &c.keys, &c.values})
          for (float& e : *x) e = e < 0.0f ? -1.0f : 1.0f;
        const Int8Case b = to_int8(c);
        for (int s = 0; s < len; ++s)
          for (int d = 0; d < dim; ++d) {
            const int k = b.keys[int8_key_index(s, d, dim)];
            QVERIFY2(k == 1 || k == 255, qPrintable(QString::number(k)));
            const int x = b.v8[static_cast<std::size_t>(s * dim + d)];
            QVERIFY2(x == -127 || x == 127, qPrintable(QString::number(x)));
          }
        for (int i = 0; i < nq * dim; ++i)
          QVERIFY(std::abs(b.q[static_cast<std::size_t>(i)]) == std::abs(b.q[0]));
        const QString what =
            QStringLiteral("%1 nq %2").arg(QString::fromLatin1(attention_variant_name(v))).arg(nq);
        check_whole(
            c, begin, false,
            [&](const float* sk, float* scores, float* out) {
              attend_heads_int8(c.q.data(), nq, b.kv, begin, len, 0.125f, scores, out, sk, v);
            },
            [&](int i, double sink, std::vector<double>& want, std::vector<double>& bound) {
              expected_int8(c, b, i, begin, len, 0.125, sink, want, bound);
            });
        if (QTest::currentTestFailed()) QFAIL(qPrintable(what));
        check_parts(
            c, begin, 3,
            [&](int lo, int hi, float* scores, float* out, float* max, float* sum) {
              attend_heads_part_int8(c.q.data(), nq, b.kv, lo, hi, 0.125f, scores, out, max, sum,
                                     v);
            },
            [&](int i, const std::vector<int>& cuts, std::vector<double>& want,
                std::vector<double>& bound) {
              expected_int8(c, b, i, begin, len, 0.125, -INFINITY, want, bound, cuts);
            },
            what);
        if (QTest::currentTestFailed()) return;
      }
    }
  }

  // Stored keys and values come back within half a step of their group's scale, and a group
  // of zeros (a head that attends nowhere) stays zero with a zero scale.
  void int8StoreRoundTrips() {
    const int dim = 96, capacity = 50;
    std::mt19937 rng(9);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<std::uint8_t> keys(tiled_key_floats(capacity, dim));
    std::vector<float> key_scales(int8_key_scales(capacity, dim));
    const std::int64_t stride = int8_value_scale_stride(capacity);
    std::vector<std::int8_t> values(int8_value_elements(capacity, dim));
    std::vector<float> value_scales(int8_value_scales(stride, dim));
    for (int pos : {0, 3, 17, 49}) {
      std::vector<float> x(dim);
      for (float& v : x) v = d(rng) * (pos + 1);
      x[5] = 40.0f * (pos + 1);  // an outlier: it coarsens its own group only
      std::fill_n(x.begin() + 64, 32, 0.0f);
      int8_store_key(keys.data(), key_scales.data(), pos, dim, x.data());
      int8_store_value(values.data(), value_scales.data(), stride, pos, dim, x.data());
      // What int8_load_key and int8_load_value give back is what the checks below read.
      const Int8Kv kv{
          keys.data(), key_scales.data(), dim, values.data(), value_scales.data(), stride, dim};
      std::vector<float> loaded_key(dim), loaded_value(dim);
      int8_load_key(kv, pos, loaded_key.data());
      int8_load_value(kv, pos, loaded_value.data());
      for (int c = 0; c < dim; ++c) {
        const float ks = key_scales[int8_key_scale_index(pos, c / kInt8Group, dim)];
        // A value row of 96 keeps one scale: its largest magnitude's.
        const float vs = value_scales[static_cast<std::size_t>(pos)];
        const float k = (keys[int8_key_index(pos, c, dim)] - 128) * ks;
        const float v = values[int8_value_index(pos, c, dim)] * vs;
        QCOMPARE(loaded_key[static_cast<std::size_t>(c)], k);
        QCOMPARE(loaded_value[static_cast<std::size_t>(c)], v);
        QVERIFY2(std::abs(k - x[c]) <= 0.5001f * ks && std::abs(v - x[c]) <= 0.5001f * vs,
                 qPrintable(QStringLiteral("pos %1 column %2: %3, %4 vs %5")
                                .arg(pos)
                                .arg(c)
                                .arg(k)
                                .arg(v)
                                .arg(x[c])));
        if (c >= 64) QCOMPARE(ks, 0.0f);
        if (c >= 32 && c < 64) QVERIFY(ks < 0.1f * (pos + 1));  // not the outlier's scale
      }
      float largest = 0.0f;
      for (float v : x) largest = std::max(largest, std::abs(v));
      QCOMPARE(value_scales[static_cast<std::size_t>(pos)], largest / 127.0f);
    }
  }

  // A latent's row of 512 keeps a value scale per 128: int8_load_value takes each element's.
  void int8LoadTakesEachValueGroup() {
    const int dim = 512, capacity = 9, pos = 5;
    const std::int64_t stride = int8_value_scale_stride(capacity);
    std::vector<std::int8_t> values(int8_value_elements(capacity, dim));
    std::vector<float> value_scales(int8_value_scales(stride, dim));
    std::vector<float> x(dim);
    for (int c = 0; c < dim; ++c)
      x[static_cast<std::size_t>(c)] = (c / 128 + 1) * 0.01f * (c % 7 - 3);
    int8_store_value(values.data(), value_scales.data(), stride, pos, dim, x.data());
    const Int8Kv kv{nullptr, nullptr, 0, values.data(), value_scales.data(), stride, dim};
    std::vector<float> v(dim);
    int8_load_value(kv, pos, v.data());
    for (int c = 0; c < dim; ++c) {
      const float scale = value_scales[static_cast<std::size_t>((c / 128) * stride + pos)];
      QVERIFY(std::abs(v[static_cast<std::size_t>(c)] - x[static_cast<std::size_t>(c)]) <=
              0.5001f * scale);
    }
    QVERIFY(value_scales[static_cast<std::size_t>(3 * stride + pos)] >
            3.5f * value_scales[static_cast<std::size_t>(pos)]);  // four scales, not one
  }

  // The elements of a value row that share a scale: the widest multiple of 32, at most 128,
  // that divides the row.
  void int8ValueGroups() {
    const std::pair<std::int64_t, std::int64_t> cases[] = {
        {32, 32},   {64, 64},  {96, 96},   {128, 128}, {160, 32},  {192, 96},
        {256, 128}, {320, 64}, {512, 128}, {576, 96},  {1024, 128}};
    for (const auto& [dim, group] : cases) {
      QCOMPARE(int8_value_group(dim), group);
      QCOMPARE(int8_value_scales(64, dim), static_cast<std::size_t>(dim / group * 64));
    }
    // A latent's values of 512 keep four scales a position, each its own quarter's largest.
    const int dim = 512, capacity = 8;
    const std::int64_t stride = int8_value_scale_stride(capacity);
    std::vector<std::int8_t> values(int8_value_elements(capacity, dim));
    std::vector<float> value_scales(int8_value_scales(stride, dim));
    std::vector<float> x(dim);
    for (int c = 0; c < dim; ++c) x[c] = 0.01f * static_cast<float>(c % 7) * (c / 128 + 1);
    int8_store_value(values.data(), value_scales.data(), stride, 5, dim, x.data());
    for (int g = 0; g < 4; ++g)
      QCOMPARE(value_scales[static_cast<std::size_t>(g * stride + 5)], 0.06f * (g + 1) / 127.0f);
  }

  // What the 8-bit cache costs against exact attention on Gaussian data at 1/sqrt(128), a
  // model's scale, and at twice as peaked: 1.2% and 1.5% of the result's size here (the 8-bit
  // queries and keys make most of it), within 2% in every variant.
  void int8CacheStaysCloseToExact() {
    for (AttentionVariant v : int8_variants()) {
      for (float sharp : {0.0884f, 0.25f}) {
        const int nq = 8, dim = 128, len = 2000;
        const Case c = make_case(nq, dim, dim, len, 21);
        const Int8Case b = to_int8(c);
        std::vector<float> scores(static_cast<std::size_t>(nq * len)),
            out(static_cast<std::size_t>(nq * dim));
        attend_heads_int8(c.q.data(), nq, b.kv, 0, len, sharp, scores.data(), out.data(), nullptr,
                          v);
        double err = 0, size = 0;
        for (int i = 0; i < nq; ++i) {
          const std::vector<double> want = expected(c, i, 0, len, sharp);
          for (int d = 0; d < dim; ++d) {
            err += std::pow(out[static_cast<std::size_t>(i * dim + d)] - want[d], 2);
            size += want[d] * want[d];
          }
        }
        QVERIFY2(std::sqrt(err / size) < 0.02,
                 qPrintable(QStringLiteral("%1 at %2: relative error %3")
                                .arg(attention_variant_name(v))
                                .arg(sharp)
                                .arg(std::sqrt(err / size))));
      }
    }
  }

  // Keys and values of different widths, as latent attention uses them (scores over the
  // latent and the rotary key, the latent alone weighed): against double precision.
  void splitKeyAndValueWidths() {
    const int nq = 12, len = 37, key_dim = 40, value_dim = 32;
    const Case c = make_case(nq, key_dim, value_dim, len, 77);
    for (AttentionVariant v : fp32_variants()) {
      std::vector<float> scores(static_cast<std::size_t>(nq * len)),
          out(static_cast<std::size_t>(nq * value_dim));
      attend_heads_split(c.q.data(), nq, c.keys.data(), key_dim, c.values.data(), c.vstride,
                         value_dim, 0, len, 0.2f, scores.data(), out.data(), nullptr, v);
      for (int i = 0; i < nq; ++i) {
        QString why;
        QVERIFY2(close(out.data() + i * value_dim, expected(c, i, 0, len, 0.2f), &why),
                 qPrintable(QStringLiteral("%1, query %2, ").arg(attention_variant_name(v)).arg(i) +
                            why));
      }
    }
  }
};

QTEST_GUILESS_MAIN(TestAttention)
#include "tst_attention.moc"
