/* kernel_config.c: the process-wide choices of the kernels
 * (hyfi_kernel_config, kernels.h). Plain C, every build. */
#include "kernels.h"

hyfi_kernel_config hyfi_kernel_settings;

void hyfi_kernel_configure(const hyfi_kernel_config *c)
{
    hyfi_kernel_settings = c ? *c : (hyfi_kernel_config){0};
}
