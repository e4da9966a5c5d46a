// The results of `skim eval` as an aligned terminal table (one row per policy) and as JSON.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "eval/eval_runner.h"

namespace skim::eval {

nlohmann::json to_json(const EvalResults& r);
std::string format_table(const EvalResults& r);

}  // namespace skim::eval
