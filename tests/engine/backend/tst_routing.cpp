#include <QtTest>

#include "engine/backend/cpu/routing.h"

using namespace tandem::backend;

class TestRouting : public QObject {
  Q_OBJECT
 private slots:
  void softmaxTopKNormalised() {
    const std::vector<float> logits = {0.0f, 2.0f, 1.0f, -1.0f};
    const Routing r = route_softmax(logits.data(), 1, 4, 2, true);
    QCOMPARE(r.experts, (std::vector<std::int32_t>{1, 2}));
    const float e = std::exp(1.0f);
    QVERIFY(std::abs(r.weights[0] - e / (e + 1)) < 1e-6f);
    QVERIFY(std::abs(r.weights[0] + r.weights[1] - 1.0f) < 1e-6f);
    const Routing raw = route_softmax(logits.data(), 1, 4, 2, false);
    QVERIFY(raw.weights[0] + raw.weights[1] < 0.95f);
  }

  // DeepSeek-V2's group-limited greedy: 8 experts in 4 groups of 2, the group with the best
  // single expert kept (top_groups 1). Both choices come from group 0, though experts 2 and
  // 3 of group 1 score far above expert 1 (and V3's rule, a group's top two summed, would
  // have kept group 1). Weights: the softmax over all experts, not renormalised, scaled.
  void groupLimitedSoftmax() {
    const std::vector<float> logits = {3.0f, -4.0f, 2.9f, 2.8f, 0.0f, 0.0f, 1.0f, -4.0f};
    double sum = 0;
    for (float l : logits) sum += std::exp(double(l));
    const Routing r = route_softmax(logits.data(), 1, 8, 2, false, 4, 1, 2.5f);
    QCOMPARE(r.experts, (std::vector<std::int32_t>{0, 1}));
    QVERIFY(std::abs(r.weights[0] - 2.5 * std::exp(3.0) / sum) < 1e-6);
    QVERIFY(std::abs(r.weights[1] - 2.5 * std::exp(-4.0) / sum) < 1e-6);
    // Two groups kept: groups 0 and 1, so the best two overall.
    const Routing two = route_softmax(logits.data(), 1, 8, 2, false, 4, 2, 1.0f);
    QCOMPARE(two.experts, (std::vector<std::int32_t>{0, 2}));
    // One group (V2-Lite's greedy), renormalised: the best two overall, summing to 1.
    const Routing all = route_softmax(logits.data(), 1, 8, 2, true, 1, 1, 1.0f);
    QCOMPARE(all.experts, (std::vector<std::int32_t>{0, 2}));
    QVERIFY(std::abs(all.weights[0] + all.weights[1] - 1.0f) < 1e-6f);
  }

  // 8 experts in 4 groups, 2 groups kept: the best single expert can lose when its group's
  // top-2 sum is low; the bias steers the choice but not the weights.
  void groupedSigmoid() {
    const std::vector<float> logits = {3.0f, -5.0f, 1.0f, 1.0f, 0.5f, 0.5f, -3.0f, -3.0f};
    const Routing r = route_grouped_sigmoid(logits.data(), nullptr, 1, 8, 2, 4, 2, true, 2.5f);
    std::vector<std::int32_t> chosen = r.experts;
    std::sort(chosen.begin(), chosen.end());
    QCOMPARE(chosen, (std::vector<std::int32_t>{
                         2, 3}));  // group 1 (1+1) beats group 0 (3-5)... and group 2
    QVERIFY(std::abs(r.weights[0] + r.weights[1] - 2.5f) < 1e-5f);

    std::vector<float> bias(8, 0.0f);
    bias[4] = 5.0f;  // lifts group 2 and expert 4
    const Routing b = route_grouped_sigmoid(logits.data(), bias.data(), 1, 8, 2, 4, 2, false, 1.0f);
    QCOMPARE(b.experts[0], 4);
    const float sig = 1.0f / (1.0f + std::exp(-0.5f));
    QVERIFY(std::abs(b.weights[0] - sig) < 1e-6f);  // the weight is the unbiased score
  }
};

QTEST_GUILESS_MAIN(TestRouting)
#include "tst_routing.moc"
