// Shared-prefix groups: which consecutive sequences of a packed batch share a prefix worth
// computing once (see Engine::RunPacked and AttentionParams::prefix_of).
#pragma once

#include <cstdint>
#include <vector>

namespace sluice {

// Sequences [first, first + count) all start with the same `prefix` tokens.
struct PrefixGroup {
  int first = 0;
  int count = 0;   // >= 2
  int prefix = 0;  // >= the minimum asked for; every member keeps at least one own token
};

// Chooses disjoint groups of consecutive sequences of a packed batch (token ids `ids`,
// offsets `cu_seqlens` [num_seqs + 1]) that maximise the tokens saved, the sum over groups
// of (count - 1) * prefix; among equal savings, the fewest groups. A group's prefix is the
// longest one all its members share (capped so that each keeps its last token), and at
// least `min_prefix` tokens. Sequences in no group are not listed. Groups are in order.
// O(num_seqs^2) at worst (a dynamic program over where runs start), plus one pass over the
// tokens.
std::vector<PrefixGroup> FindPrefixGroups(const int32_t* ids, const int32_t* cu_seqlens,
                                          int num_seqs, int min_prefix);

// The tokens `groups` save: the sum of (count - 1) * prefix.
int64_t PrefixTokensSaved(const std::vector<PrefixGroup>& groups);

}  // namespace sluice
