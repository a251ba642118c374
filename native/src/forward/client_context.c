/*
 * The calling thread's current contexts: a stack of server context handles
 * per thread, as the driver keeps one per thread. The entry points that set
 * it are in client_local.c; every request carries its top (client.c). A leaf:
 * it calls nothing of the client.
 */
#include "client.h"

#define STACK_MAX 32

static __thread CUcontext stack[STACK_MAX];
static __thread unsigned depth;

CUcontext fwd_ctx_current(void)
{
    return depth > 0 ? stack[depth - 1] : NULL;
}

void fwd_ctx_set(CUcontext ctx)
{
    if (depth == 0) {
        if (ctx == NULL)
            return; /* nothing current, nothing made current */
        depth = 1;
    }
    stack[depth - 1] = ctx;
}

bool fwd_ctx_push(CUcontext ctx)
{
    if (depth == STACK_MAX)
        return false;
    stack[depth++] = ctx;
    return true;
}

bool fwd_ctx_pop(CUcontext *out)
{
    if (depth == 0 || stack[depth - 1] == NULL)
        return false;
    *out = stack[--depth];
    return true;
}

/* Called by cuCtxCreate (which makes its context current) and cuCtxDestroy. */
void fwd_ctx_pushed(CUcontext ctx)
{
    if (depth < STACK_MAX)
        stack[depth++] = ctx;
}

void fwd_ctx_destroyed(CUcontext ctx)
{
    for (unsigned i = 0; i < depth; i++)
        if (stack[i] == ctx)
            stack[i] = NULL;
    while (depth > 0 && stack[depth - 1] == NULL)
        depth--;
}
