// NormalizedString: HF tokenizers' alignment-tracking string transformations.
#include <algorithm>

#include "tokenizer/internal.h"

namespace sluice::tok {

NormalizedString NormalizedString::FromOriginal(std::string_view s, uint32_t shift) {
  NormalizedString ns;
  ns.norm.assign(s);
  ns.align.resize(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len;
    DecodeAt(s, i, &len);
    Offsets o{shift + uint32_t(i), shift + uint32_t(i + len)};
    for (size_t k = 0; k < len; ++k) ns.align[i + k] = o;
    i += len;
  }
  ns.orig_begin = shift;
  ns.orig_end = shift + static_cast<uint32_t>(s.size());
  return ns;
}

void NormalizedString::Transform(const std::vector<std::pair<char32_t, int>>& dest,
                                 size_t initial_offset) {
  std::string out;
  std::vector<Offsets> out_align;
  out.reserve(norm.size() + dest.size());
  out_align.reserve(norm.size() + dest.size());
  size_t offset = 0;  // byte cursor in the old string
  auto skip_char = [&]() -> size_t {
    if (offset >= norm.size()) return 0;
    size_t len;
    DecodeAt(norm, offset, &len);
    offset += len;
    return len;
  };
  for (size_t k = 0; k < initial_offset; ++k) skip_char();
  const Offsets start{orig_begin, orig_begin};
  for (const auto& [c, change] : dest) {
    Offsets a;
    if (change > 0) {
      a = offset < 1 ? start : align[std::min(offset, align.size()) - 1];
    } else {
      a = align.empty() ? start : align[std::min(offset, align.size() - 1)];
      skip_char();
    }
    for (int r = 0; r < -change; ++r) skip_char();
    size_t before = out.size();
    AppendUtf8(&out, c);
    out_align.insert(out_align.end(), out.size() - before, a);
  }
  norm = std::move(out);
  align = std::move(out_align);
}

NormalizedString NormalizedString::Slice(size_t start, size_t end) const {
  NormalizedString ns;
  ns.norm = norm.substr(start, end - start);
  ns.align.assign(align.begin() + start, align.begin() + end);
  if (start < end) {
    ns.orig_begin = align[start].first;
    ns.orig_end = align[end - 1].second;
  } else {
    uint32_t p = start < align.size() ? align[start].first : orig_end;
    ns.orig_begin = ns.orig_end = p;
  }
  return ns;
}

std::optional<Offsets> NormalizedString::ConvertOffsets(size_t s, size_t e) const {
  if (s == e) return Offsets{orig_begin + uint32_t(s), orig_begin + uint32_t(e)};
  if (s > e || e > align.size()) return std::nullopt;
  return Offsets{align[s].first, align[e - 1].second};
}

void NormalizedString::Normalize(bool compat, bool compose) {
  // ASCII is invariant under every normalization form.
  bool ascii = true;
  for (char ch : norm) ascii &= static_cast<unsigned char>(ch) < 0x80;
  if (ascii) return;
  struct Item {
    char32_t c;
    int change;
    int ccc;
  };
  std::vector<Item> dec;
  dec.reserve(norm.size());
  std::vector<char32_t> tmp;
  size_t run_start = 0;
  auto sort_run = [&]() {
    std::stable_sort(dec.begin() + run_start, dec.end(),
                     [](const Item& a, const Item& b) { return a.ccc < b.ccc; });
  };
  for (size_t i = 0; i < norm.size();) {
    size_t len;
    char32_t c = DecodeAt(norm, i, &len);
    i += len;
    tmp.clear();
    Decompose(c, compat, &tmp);
    for (size_t k = 0; k < tmp.size(); ++k) {
      int cc = CombiningClass(tmp[k]);
      if (cc == 0) {
        sort_run();
        dec.push_back({tmp[k], k == 0 ? 0 : 1, 0});
        run_start = dec.size();
      } else {
        dec.push_back({tmp[k], k == 0 ? 0 : 1, cc});
      }
    }
  }
  sort_run();
  std::vector<std::pair<char32_t, int>> out;
  out.reserve(dec.size());
  if (!compose) {
    for (const auto& it : dec) out.emplace_back(it.c, it.change);
  } else {
    std::optional<std::pair<char32_t, int>> composee;
    std::optional<int> last_ccc;
    std::vector<std::pair<char32_t, int>> buffer;
    for (const auto& it : dec) {
      char32_t ch = it.c;
      int change = it.change, ch_class = it.ccc;
      if (!composee) {
        if (ch_class != 0) {
          out.emplace_back(ch, change);
          continue;
        }
        composee = {ch, change};
        continue;
      }
      auto k = *composee;
      if (!last_ccc) {
        if (char32_t r = Compose(k.first, ch)) {
          composee = {r, k.second + change - 1};
          continue;
        }
        if (ch_class == 0) {
          out.push_back(k);
          composee = {ch, change};
          continue;
        }
        buffer.emplace_back(ch, change);
        last_ccc = ch_class;
      } else {
        if (*last_ccc >= ch_class) {
          if (ch_class == 0) {
            out.push_back(k);
            out.insert(out.end(), buffer.begin(), buffer.end());
            buffer.clear();
            composee = {ch, change};
            last_ccc.reset();
            continue;
          }
          buffer.emplace_back(ch, change);
          last_ccc = ch_class;
          continue;
        }
        if (char32_t r = Compose(k.first, ch)) {
          composee = {r, k.second + change - 1};
          continue;
        }
        buffer.emplace_back(ch, change);
        last_ccc = ch_class;
      }
    }
    if (composee) out.push_back(*composee);
    out.insert(out.end(), buffer.begin(), buffer.end());
  }
  // Skip the transform when nothing changed (the common case).
  bool same = true;
  size_t k = 0;
  for (size_t i = 0; i < norm.size(); ++k) {
    size_t len;
    if (k >= out.size() || DecodeAt(norm, i, &len) != out[k].first) {
      same = false;
      break;
    }
    i += len;
  }
  if (same && k == out.size()) return;
  Transform(out, 0);
}

void NormalizedString::Lowercase() {
  bool has_upper_or_non_ascii = false;
  for (char ch : norm) {
    auto u = static_cast<unsigned char>(ch);
    has_upper_or_non_ascii |= u >= 0x80 || (u >= 'A' && u <= 'Z');
  }
  if (!has_upper_or_non_ascii) return;
  bool changed = false;
  std::vector<std::pair<char32_t, int>> out;
  out.reserve(norm.size());
  std::vector<char32_t> tmp;
  for (size_t i = 0; i < norm.size();) {
    size_t len;
    char32_t c = DecodeAt(norm, i, &len);
    i += len;
    tmp.clear();
    ToLowercase(c, &tmp);
    changed |= tmp.size() != 1 || tmp[0] != c;
    for (size_t k = 0; k < tmp.size(); ++k) out.emplace_back(tmp[k], k > 0 ? 1 : 0);
  }
  if (changed) Transform(out, 0);
}

void NormalizedString::LRStrip(bool left, bool right) {
  std::vector<char32_t> cps = ToCodePoints(norm);
  size_t leading = 0, trailing = 0;
  if (left) {
    while (leading < cps.size() && IsWhitespace(cps[leading])) ++leading;
  }
  if (right) {
    while (trailing < cps.size() && IsWhitespace(cps[cps.size() - 1 - trailing])) ++trailing;
  }
  if (leading == 0 && trailing == 0) return;
  size_t count = cps.size();
  std::vector<std::pair<char32_t, int>> out;
  for (size_t i = 0; i < count; ++i) {
    if (i < leading || i >= count - trailing) continue;
    // HF compares a char index with a byte length here; replicated for parity.
    if (i + trailing + 1 == norm.size()) {
      out.emplace_back(cps[i], -static_cast<int>(trailing));
    } else {
      out.emplace_back(cps[i], 0);
    }
  }
  Transform(out, leading);
}

void NormalizedString::Prepend(std::string_view s) {
  if (norm.empty() || s.empty()) return;
  // HF: the first prefix char replaces the first char, the rest and that char are inserted, so
  // all of them align to the first char.
  std::vector<std::pair<char32_t, int>> out;
  auto add = ToCodePoints(s);
  for (size_t i = 0; i < add.size(); ++i) out.emplace_back(add[i], i != 0 ? 1 : 0);
  bool first = true;
  for (size_t i = 0; i < norm.size();) {
    size_t len;
    char32_t c = DecodeAt(norm, i, &len);
    i += len;
    out.emplace_back(c, first ? 1 : 0);
    first = false;
  }
  Transform(out, 0);
}

void NormalizedString::ReplaceRanges(const std::vector<Offsets>& matches,
                                     std::string_view content) {
  if (matches.empty()) return;
  std::string out;
  std::vector<Offsets> out_align;
  out.reserve(norm.size());
  out_align.reserve(norm.size());
  size_t last = 0;
  const Offsets start{orig_begin, orig_begin};
  for (const auto& [s, e] : matches) {
    out.append(norm, last, s - last);
    out_align.insert(out_align.end(), align.begin() + last, align.begin() + s);
    Offsets a = e < 1 ? start : align[e - 1];
    size_t before = out.size();
    out.append(content);
    out_align.insert(out_align.end(), out.size() - before, a);
    last = e;
  }
  out.append(norm, last, std::string::npos);
  out_align.insert(out_align.end(), align.begin() + last, align.end());
  norm = std::move(out);
  align = std::move(out_align);
}

Matches MatchesFromRanges(const std::vector<Offsets>& ranges, size_t len) {
  Matches m;
  if (len == 0) {
    m.push_back({{0, 0}, false});
    return m;
  }
  uint32_t prev = 0;
  for (const auto& r : ranges) {
    if (prev != r.first) m.push_back({{prev, r.first}, false});
    m.push_back({r, true});
    prev = r.second;
  }
  if (prev != len) m.push_back({{prev, static_cast<uint32_t>(len)}, false});
  return m;
}

std::vector<NormalizedString> SplitNormalized(const NormalizedString& ns, Matches matches,
                                              SplitBehavior behavior) {
  std::vector<std::pair<Offsets, bool>> splits;  // (range, remove)
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (auto& m : matches) splits.push_back({m.first, false});
      break;
    case SplitBehavior::kRemoved:
      splits = std::move(matches);
      break;
    case SplitBehavior::kContiguous: {
      bool prev = false;
      for (auto& [o, is_match] : matches) {
        if (is_match == prev && !splits.empty()) {
          splits.back().first.second = o.second;
        } else {
          splits.push_back({o, false});
        }
        prev = is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool prev = false;
      for (auto& [o, is_match] : matches) {
        if (is_match && !prev && !splits.empty()) {
          splits.back().first.second = o.second;
        } else {
          splits.push_back({o, false});
        }
        prev = is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev = false;
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        auto& [o, is_match] = *it;
        if (is_match && !prev && !splits.empty()) {
          splits.back().first.first = o.first;
        } else {
          splits.push_back({o, false});
        }
        prev = is_match;
      }
      std::reverse(splits.begin(), splits.end());
      break;
    }
  }
  std::vector<NormalizedString> out;
  out.reserve(splits.size());
  for (auto& [o, remove] : splits) {
    if (remove || o.first >= o.second) continue;
    out.push_back(ns.Slice(o.first, o.second));
  }
  return out;
}

}  // namespace sluice::tok
