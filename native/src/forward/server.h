/*
 * The context server (krex-ctxd): one process per slot of a GPU's forwarding
 * pool, owning a live context, executing one command's forwarded calls at a
 * time. Files:
 *   server.c       its life: the driver, the control channel, serving a segment
 *   server_exec.c  executing one request; what the command created (its
 *                  pinned arena's registered ranges too), and putting the
 *                  context back after it
 */
#ifndef KREX_FWD_SERVER_H
#define KREX_FWD_SERVER_H

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>

#include "fwd_common.h"

/* Loads the driver, creates the context; false with `err` filled on failure. */
bool srv_driver_open(char *err, size_t errlen);
/* Executes one request (its header copied, its blob private). Writes the
 * reply where it wants one; a request that cannot be valid fails the
 * segment: returns false with `err` filled. */
bool srv_execute(struct fwd_segment *seg, const struct krex_fwd_msg *m, const uint8_t *blob, char *err,
                 size_t errlen);
/* After a command: frees what it left, checks the context. False (with the
 * reason) when this process must retire. */
bool srv_reset(char *why, size_t whylen);
/* The command's pinned arena as mapped by server.c (NULL, 0: none); its
 * registered ranges are unregistered by srv_reset, before it is unmapped. */
void srv_set_arena(uint8_t *base, uint64_t size);
/* The simulator's attribution of work to a tenant, when the driver is the simulator. */
void srv_set_tenant(int tenant_id);

#endif /* KREX_FWD_SERVER_H */
