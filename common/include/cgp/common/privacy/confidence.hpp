// λ(d, β) of Lemma 6.1: ‖Z‖ ≤ λ(d, β) with probability ≥ 1 − β for Z ~ N(0, I_d).
#pragma once

#include <cstddef>

#include "cgp/common/expected.hpp"

namespace cgp::privacy {

// d = 1: √(2 log(2/β)); d = 2: √(2 log(1/β)); d > 2: √(d + 2√(d log(1/β)) + 2 log(1/β)).
// Rounded up (a wider interval only makes elimination more careful). d ≥ 1, β ∈ (0, 1).
Expected<double> gaussian_norm_bound(std::size_t dimension, double beta);

}  // namespace cgp::privacy
