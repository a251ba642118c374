/* What a program with the CUDA runtime linked in (nvcc's default) does
 * first: ask the driver for its private tables. Without them it stops. */
#include "corpus_driver.h"

int main(void)
{
    CHECK(cuInit(0));
    const void *table = NULL;
    CUuuid id = {{0}};
    CUresult r = cuGetExportTable(&table, &id);
    if (r != CUDA_SUCCESS || table == NULL) {
        printf("static_runtime: no private tables (%d)\n", (int)r);
        return 0; /* the simulated driver has none either */
    }
    printf("static_runtime: tables\n");
    return 0;
}
