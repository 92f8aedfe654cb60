// devcaps emu: autocast (torch.autocast("emu")), as PyTorch's OpenReg registers it
// (torch_openreg/csrc/amp/autocast_mode.cpp). A separate file: ATen/autocast_mode.h pulls in
// all of ATen, and ninja compiles the two files side by side.
//
// Ops not listed run in the dtype they are given (the fallthrough); the matmul family runs in
// the autocast dtype, as on CUDA (lower_precision_fp). The Python module's
// get_amp_supported_dtype() names the dtypes (torch/amp/autocast_mode.py asks it).
#include <ATen/autocast_mode.h>

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  KERNEL_PRIVATEUSEONE(mm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(addmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(bmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(baddbmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(matmul, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(linear, lower_precision_fp)
}
