/* The C test tenants' checks: a failed driver call exits 2, a failed region
 * call exits 3, each naming the call. Define TENANT (the program's name)
 * before including it. */
#ifndef KREX_TENANT_CHECK_H
#define KREX_TENANT_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                 \
    do {                                                                            \
        CUresult r_ = (call);                                                       \
        if (r_ != CUDA_SUCCESS) {                                                   \
            fprintf(stderr, TENANT ": %s failed: %d\n", #call, (int)r_);            \
            exit(2);                                                                \
        }                                                                           \
    } while (0)
#define REGION(call)                                                                \
    do {                                                                            \
        int r_ = (call);                                                            \
        if (r_ != 0) {                                                              \
            fprintf(stderr, TENANT ": %s failed: %d\n", #call, r_);                 \
            exit(3);                                                                \
        }                                                                           \
    } while (0)

#endif
