// Argument checks the CPU page selections share (group_page_select, quest_page_select): the
// shapes both argument structs carry, and a sequence's length against its table's capacity.
#pragma once

#include <stdexcept>
#include <string>

namespace skim::cpu {

template <class Args>
bool select_shapes_ok(const Args& a) {
  return a.batch >= 0 && a.num_heads > 0 && a.num_kv_heads > 0 && a.head_dim > 0 && a.page_size > 0 &&
         a.num_heads % a.num_kv_heads == 0;
}

// Tokens of sequence b; `who` names the selection in the error.
template <class Args>
int checked_context(const Args& a, int b, const char* who) {
  const int len = a.seq_lens[b];
  if (len < 0 || len > a.max_pages_per_seq * a.page_size)
    throw std::invalid_argument(std::string(who) + ": seq_len out of range");
  return len;
}

}  // namespace skim::cpu
