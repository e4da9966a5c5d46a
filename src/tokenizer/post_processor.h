// The part of tokenizer.json's post_processor that encode_prompt needs: the special tokens
// the template puts around a single sequence (Llama's BOS).
#pragma once

#include <vector>

#include "tokenizer/json_fields.h"

namespace skim::tok {

struct PromptTemplate {
  std::vector<int> prefix;  // ids before the text
  std::vector<int> suffix;  // ids after it
};

// TemplateProcessing, ByteLevel (adds nothing), RobertaProcessing, BertProcessing, Sequence.
PromptTemplate parse_post_processor(const JsonAt& spec);

}  // namespace skim::tok
