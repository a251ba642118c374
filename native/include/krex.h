/*
 * krex.h - the public C API of KREX for benchmark code.
 *
 * Bracket the timing loop with krex_region_enter() / krex_region_exit().
 * Under the KREX runtime (KREX_REGION_SOCKET set) enter blocks until the
 * runtime grants this process exclusive use of its GPU: other tenants are
 * gated, drained and frozen. Outside the runtime both are no-ops returning 0,
 * so the same program runs standalone.
 *
 * Link with -lkrex, or rely on the runtime preloading libkrex.so (declare the
 * functions weak and check for NULL to support both).
 */
#ifndef KREX_H
#define KREX_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Blocks until this process holds the region of its GPU. Returns 0 on success
 * (or when not running under the runtime), or a negative errno:
 *   -ECONNREFUSED / -ENOENT  the runtime's region socket cannot be reached
 *   -EPROTO                  the runtime answered something unexpected
 *   -EBUSY                   this process already holds or requested the region
 *   -ETIMEDOUT, -EPERM, ...  the runtime refused (see docs/native.md)
 * Thread-safe; one region per process at a time. */
int krex_region_enter(void);

/* Releases the region. 0 on success or when not under the runtime; -EINVAL if
 * this process does not hold the region; other negative errno as above. */
int krex_region_exit(void);

/* How many regions this process has been granted so far (0 when not under
 * the runtime). Forwarded mode's client asks it: a command that meets a call
 * forwarded mode does not serve runs again in process mode only while no
 * region has been measured. */
int krex_regions_entered(void);

/* Measurement integrity of the region this process holds (else of the last
 * one it held), as the library judged the CUDA-event timings asked for so far:
 * "<windows>,<escaped>,<other_thread>,<empty>,<stream_mismatch>" (counts of
 * timed windows; docs/integrity.md). krex_region_exit sends it to the runtime,
 * which attaches it to the region's certificate. Returns the length written,
 * -ENODEV when the process is under no gate (nothing is judged then),
 * -ENOTSUP when KREX_INTEGRITY=0 turned the bookkeeping off, or
 * -EINVAL / -ENOSPC. */
int krex_region_integrity(char *buf, size_t size);

/* The elapsed times the driver returned for the timed windows judged in the
 * region this process holds (else in the last one it held), summarised:
 * "<windows>,<median>,<min>,<p10>,<p90>,<max>,<mean>,<dropped>", times in
 * milliseconds with 17 significant digits (exact), over the first 4096 windows of the
 * region (<dropped>: judged windows after those, not summarised); the median
 * of an even count is the mean of the middle two, p10 and p90 interpolate
 * linearly between the closest ranks. krex_region_exit sends it with the
 * counts; the runtime puts it in the region's integrity record as `timing`
 * (docs/integrity.md). Returns the length written, 0 (an empty line) when no
 * window was judged in that region, or the errors of krex_region_integrity. */
int krex_region_timing(char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* KREX_H */
