// CSAttention in the engine: with lists that hold every key and keep = 1 it equals dense,
// also when switched in after a dense prefill (the engine re-encodes the prompt so the tables
// see its queries) and on a fork; at a small keep it reports recall and table bytes.
#include <gtest/gtest.h>

#include <cmath>

#include "tiny_engine.h"
#include "attention/policy.h"
#include "core/error.h"
#include "skim/engine.h"

namespace skim {
namespace {




using test::random_ids;
const auto& max_diff = test::max_abs_diff;

std::unique_ptr<Engine> make_engine(const std::string& policy) { return test::make_tiny_engine(policy, 512, 3); }

std::vector<std::vector<float>> decode_all(Engine& e, int seq, const std::vector<int>& feed) {
  std::vector<std::vector<float>> out;
  for (int t : feed) out.push_back(e.decode(std::span<const int>(&seq, 1), std::span<const int>(&t, 1)));
  return out;
}

TEST(CsEngine, FullListsAndKeepEqualDense) {
  auto prompt = random_ids(300), feed = random_ids(10);
  auto d = make_engine("dense");
  int ds = d->open_sequence();
  d->append(ds, prompt, {});
  auto dense = decode_all(*d, ds, feed);
  for (const char* spec : {"cs:subspaces=4,centroids=8,list=400,keep=1,recall=1",
                           "cs:subspaces=2,centroids=4,list=400,keep=1,pool=group,step=3",
                           "cs:subspaces=4,centroids=8,list=400,keep=1,score=dot"}) {
    auto e = make_engine(spec);
    int s = e->open_sequence();
    e->append(s, prompt, {});
    auto got = decode_all(*e, s, feed);
    for (size_t i = 0; i < feed.size(); ++i) EXPECT_LT(max_diff(dense[i], got[i]), 1e-4f) << spec << " step " << i;
    // Switched in after a dense prefill, then on a fork: the same.
    auto e2 = make_engine("dense");
    int base = e2->open_sequence();
    e2->append(base, prompt, {});
    e2->set_policy(spec);
    int fork = e2->fork_sequence(base);
    auto got2 = decode_all(*e2, fork, feed);
    for (size_t i = 0; i < feed.size(); ++i) EXPECT_LT(max_diff(dense[i], got2[i]), 1e-4f) << spec << " fork, step " << i;
  }
}

TEST(CsEngine, SparseReportsRecallAndTableBytes) {
  auto prompt = random_ids(400), feed = random_ids(6);
  auto e = make_engine("cs:subspaces=4,centroids=16,keep=0.1,window=8,recall=1");
  int s = e->open_sequence();
  e->append(s, prompt, {});
  decode_all(*e, s, feed);
  auto c = e->policy().counters();
  EXPECT_GT(c["cs_recall"], 0.0);
  EXPECT_LE(c["cs_recall"], 1.0);
  EXPECT_GT(c["cs_table_bytes"], 0.0);
  EXPECT_GT(c["cs_union_keys"], 0.0);
  e->close_sequence(s);
  EXPECT_EQ(e->policy().counters()["cs_table_bytes"], 0.0);
}

TEST(CsEngine, RefusesBadParameters) {
  for (const char* bad : {"cs:keep=0", "cs:keep=2", "cs:pool=row", "cs:step=0", "cs:centroids=0",
                          "cs:list=0", "cs+quest", "cs:backoff_top=100"}) {
    EXPECT_THROW(make_policy(bad), Error) << bad;
  }
  EXPECT_NO_THROW(make_policy("cs:subspaces=8,centroids=64,list=0.1,keep=0.05,window=64,step=4,pool=group"));
}

}  // namespace
}  // namespace skim
