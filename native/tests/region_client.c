/*
 * Calls the C region API in the order given on the command line and prints
 * each return value:  region_client enter exit enter ...  ->  "enter 0" ...
 * ("pause" waits two seconds, for a connection to idle.)
 * Linked against libkrex.so, as a C benchmark would be.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "krex.h"

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "pause") == 0) {
            sleep(2);
            continue;
        }
        int rc = strcmp(argv[i], "enter") == 0 ? krex_region_enter() : krex_region_exit();
        printf("%s %d\n", argv[i], rc);
        fflush(stdout);
    }
    return 0;
}
