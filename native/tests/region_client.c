/*
 * Calls the C region API in the order given on the command line and prints
 * each return value:  region_client enter exit enter ...  ->  "enter 0" ...
 * Linked against libkrex.so, as a C benchmark would be.
 */
#include <stdio.h>
#include <string.h>

#include "krex.h"

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        int rc = strcmp(argv[i], "enter") == 0 ? krex_region_enter() : krex_region_exit();
        printf("%s %d\n", argv[i], rc);
        fflush(stdout);
    }
    return 0;
}
