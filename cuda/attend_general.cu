// The general attention kernels: attend.cuh's attend_kernel with GENERAL = true (rotary keys for
// gather_attend_rope, SPEC §6; V rows mapped apart from K's, e.g. K and V paged through different
// tables), in a file of their own so that they compile beside score_attend.cu.
#include "attend.cuh"

namespace sift_cuda {

template <typename T, int D> static KernelInfo general_pick_gc(int gc)
{
    switch (gc) {
    case 1: return attend_info<T, D, 1, true>();
    case 2: return attend_info<T, D, 2, true>();
    default: return attend_info<T, D, 4, true>(); // heads_per_block: at most 4 in the general kernels
    }
}

KernelInfo general_kernel_info(int f16, int d, int gc)
{
    if (f16) return d <= 64 ? general_pick_gc<__half, 64>(gc) : general_pick_gc<__half, 128>(gc);
    return d <= 64 ? general_pick_gc<float, 64>(gc) : general_pick_gc<float, 128>(gc);
}

} // namespace sift_cuda
