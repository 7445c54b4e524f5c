#include "engine/prefix_groups.h"

#include <algorithm>
#include <limits>

namespace sluice {

std::vector<PrefixGroup> FindPrefixGroups(const int32_t* ids, const int32_t* cu_seqlens,
                                          int num_seqs, int min_prefix) {
  const int S = num_seqs;
  std::vector<PrefixGroup> groups;
  if (S < 2) return groups;
  min_prefix = std::max(min_prefix, 1);
  // adj[i]: tokens sequences i and i + 1 share, capped so that both keep one own token.
  // A run's shared prefix is the minimum of its adjacent values.
  std::vector<int> adj(static_cast<size_t>(S - 1));
  for (int i = 0; i + 1 < S; ++i) {
    const int32_t* a = ids + cu_seqlens[i];
    const int32_t* b = ids + cu_seqlens[i + 1];
    const int cap =
        std::min(cu_seqlens[i + 1] - cu_seqlens[i], cu_seqlens[i + 2] - cu_seqlens[i + 1]) - 1;
    int n = 0;
    while (n < cap && a[n] == b[n]) ++n;
    adj[static_cast<size_t>(i)] = n;
  }
  // best[j]: the best choice for the first j sequences, (saved, groups); start[j]: the first
  // sequence of the group ending at sequence j - 1, or -1 when j - 1 is in no group.
  struct Best {
    int64_t saved = 0;
    int groups = 0;
    bool operator<(const Best& o) const {
      return saved != o.saved ? saved < o.saved : groups > o.groups;
    }
  };
  std::vector<Best> best(static_cast<size_t>(S) + 1);
  std::vector<int> start(static_cast<size_t>(S) + 1, -1);
  for (int j = 1; j <= S; ++j) {
    best[j] = best[j - 1];
    int shared = std::numeric_limits<int>::max();
    for (int i = j - 2; i >= 0; --i) {  // the run [i, j - 1]
      shared = std::min(shared, adj[static_cast<size_t>(i)]);
      if (shared < min_prefix) break;  // longer runs share no more
      const Best cand{best[i].saved + static_cast<int64_t>(j - 1 - i) * shared, best[i].groups + 1};
      if (best[j] < cand) {
        best[j] = cand;
        start[j] = i;
      }
    }
  }
  for (int j = S; j > 0;) {
    const int i = start[j];
    if (i < 0) {
      --j;
      continue;
    }
    int shared = std::numeric_limits<int>::max();
    for (int k = i; k < j - 1; ++k) shared = std::min(shared, adj[static_cast<size_t>(k)]);
    groups.push_back({i, j - i, shared});
    j = i;
  }
  std::reverse(groups.begin(), groups.end());
  return groups;
}

int64_t PrefixTokensSaved(const std::vector<PrefixGroup>& groups) {
  int64_t saved = 0;
  for (const PrefixGroup& g : groups) saved += static_cast<int64_t>(g.count - 1) * g.prefix;
  return saved;
}

}  // namespace sluice
