/*
 * One-line messages to stderr, written with a single write() so lines of
 * concurrent threads and processes do not interleave.
 */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "intercept_internal.h"

void krex_log(const char *fmt, ...)
{
    char line[512];
    int n = snprintf(line, sizeof line, "krex: ");
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    size_t len = (size_t)n + ((size_t)m < sizeof line - (size_t)n - 1 ? (size_t)m : sizeof line - (size_t)n - 2);
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w; /* nowhere to report a failed report */
}
