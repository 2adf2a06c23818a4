/*
 * The variadic calls of the GridRPC API. Stable Rust cannot define a C variadic function, so
 * these read the va_list here, guided by the service's description (which of the arguments
 * arrive as int, double or pointer), and hand the arguments to libgridwise as an array.
 */
#include <stdarg.h>
#include <stddef.h>

#include "grpc.h"

/* One argument as read from the va_list. */
typedef struct gridwise_raw_arg_s {
    int kind; /* 'i': an int by value, 'd': a double by value, 'p': a pointer */
    int i;
    double d;
    void *p;
} gridwise_raw_arg_t;

/* In libgridwise (Rust). */
extern grpc_error_t gridwise_capi_arg_kinds(grpc_function_handle_t *handle, char *kinds,
                                            size_t capacity, size_t *count);
extern grpc_error_t gridwise_capi_call_raw(grpc_function_handle_t *handle, int asynchronous,
                                           grpc_sessionid_t *session_id,
                                           const gridwise_raw_arg_t *args, size_t count);

/* Services with more arguments than this are called through an argument stack. */
#define GRIDWISE_MAX_VARARGS 64

static grpc_error_t call_va(grpc_function_handle_t *handle, int asynchronous,
                            grpc_sessionid_t *session_id, va_list ap) {
    char kinds[GRIDWISE_MAX_VARARGS];
    gridwise_raw_arg_t args[GRIDWISE_MAX_VARARGS];
    size_t count = 0;
    grpc_error_t e = gridwise_capi_arg_kinds(handle, kinds, GRIDWISE_MAX_VARARGS, &count);
    if (e != GRPC_NO_ERROR) {
        return e;
    }
    for (size_t k = 0; k < count; k++) {
        args[k].kind = kinds[k];
        args[k].i = 0;
        args[k].d = 0.0;
        args[k].p = NULL;
        switch (kinds[k]) {
        case 'i':
            args[k].i = va_arg(ap, int);
            break;
        case 'd':
            args[k].d = va_arg(ap, double);
            break;
        default:
            args[k].p = va_arg(ap, void *);
            break;
        }
    }
    return gridwise_capi_call_raw(handle, asynchronous, session_id, args, count);
}

grpc_error_t grpc_call(grpc_function_handle_t *handle, ...) {
    va_list ap;
    va_start(ap, handle);
    grpc_error_t e = call_va(handle, 0, NULL, ap);
    va_end(ap);
    return e;
}

grpc_error_t grpc_call_async(grpc_function_handle_t *handle, grpc_sessionid_t *session_id, ...) {
    if (session_id != NULL) {
        *session_id = GRPC_SESSIONID_VOID;
    }
    va_list ap;
    va_start(ap, session_id);
    grpc_error_t e = call_va(handle, 1, session_id, ap);
    va_end(ap);
    return e;
}
