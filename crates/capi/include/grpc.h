/*
 * grpc.h: the GridRPC End-User API (OGF GFD.52) of gridwise.
 *
 * A program written against GFD.52 compiles against this header and links with
 * -lgridwise (see gridwise.pc). Calls are ranked by the gridwise agent named in the
 * configuration file given to grpc_initialize (the client's TOML configuration: `agent`,
 * `token`, ...), then run on the chosen server.
 *
 * Arguments of grpc_call and grpc_call_async follow the service's description (print it with
 * `gridwise call --help SERVICE` or `gridwise status`), one C argument per IDL argument:
 *
 *   IDL type            IN                         OUT / INOUT
 *   int                 int (by value)             int *
 *   double              double (by value)          double *
 *   string              const char *               char ** (set to a malloc'd copy: free() it)
 *   bytes               gridwise_bytes_t *         gridwise_bytes_t * (data malloc'd: free() it)
 *   vector<T>[n]        const T *                  T * (the caller's buffer of n elements)
 *   matrix<T>[r,c]      const T * (row-major)      T * (the caller's buffer, r*c, row-major)
 *
 * with T = double (f64), float (f32), int32_t (i32) or int64_t (i64). Array dimensions come
 * from the int arguments the description names. OUT and INOUT buffers are written when the
 * call completes: by grpc_call itself, or by the wait that returns an asynchronous session.
 *
 * With an argument stack (grpc_arg_stack_*), every argument is pushed as a pointer: scalars
 * as a pointer to their value (IN as well), the others as in the table.
 */
#ifndef GRIDWISE_GRPC_H
#define GRIDWISE_GRPC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int grpc_error_t;
typedef int grpc_sessionid_t;

#define GRPC_NO_ERROR                 0
#define GRPC_NOT_INITIALIZED          1
#define GRPC_CONFIGFILE_NOT_FOUND     2
#define GRPC_CONFIGFILE_ERROR         3
#define GRPC_SERVER_NOT_FOUND         4
#define GRPC_FUNCTION_NOT_FOUND       5
#define GRPC_INVALID_FUNCTION_HANDLE  6
#define GRPC_INVALID_SESSION_ID       7
#define GRPC_RPC_REFUSED              8
#define GRPC_COMMUNICATION_FAILED     9
#define GRPC_SESSION_FAILED          10
#define GRPC_NOT_COMPLETED           11
#define GRPC_NONE_COMPLETED          12
#define GRPC_OTHER_ERROR_CODE        13
#define GRPC_UNKNOWN_ERROR_CODE      14
#define GRPC_ALREADY_INITIALIZED     15
#define GRPC_LAST_ERROR_CODE         16

/* The id an asynchronous call that failed to start leaves in its session pointer. */
#define GRPC_SESSIONID_VOID (-1)

/* A function handle: the program owns the memory, gridwise fills it in. */
typedef struct grpc_function_handle_s {
    uint32_t magic; /* set by the init functions; anything else is not a handle */
    int id;
    void *impl;     /* owned by libgridwise until grpc_function_handle_destruct */
} grpc_function_handle_t;

/* An argument stack (opaque). */
typedef struct grpc_arg_stack_s grpc_arg_stack_t;

/* A `bytes` argument. */
typedef struct gridwise_bytes_s {
    void *data;
    size_t size;
} gridwise_bytes_t;

/* Initializing and finalizing. grpc_initialize(NULL) (a gridwise extension) takes the agent
   from GRIDWISE_AGENT and the token from GRIDWISE_TOKEN, as the gridwise command does. */
grpc_error_t grpc_initialize(const char *config_file_name);
grpc_error_t grpc_finalize(void);

/* Function handles */
grpc_error_t grpc_function_handle_default(grpc_function_handle_t *handle, const char *func_name);
/* server: "host:port" of a gridwise server, or its registered name */
grpc_error_t grpc_function_handle_init(grpc_function_handle_t *handle, const char *server,
                                       const char *func_name);
grpc_error_t grpc_function_handle_destruct(grpc_function_handle_t *handle);
grpc_error_t grpc_get_handle(grpc_function_handle_t **handle, grpc_sessionid_t session_id);

/* Calls */
grpc_error_t grpc_call(grpc_function_handle_t *handle, ...);
grpc_error_t grpc_call_async(grpc_function_handle_t *handle, grpc_sessionid_t *session_id, ...);
grpc_error_t grpc_call_argstack(grpc_function_handle_t *handle, grpc_arg_stack_t *args);
grpc_error_t grpc_call_argstack_async(grpc_function_handle_t *handle, grpc_sessionid_t *session_id,
                                      grpc_arg_stack_t *args);

/* Argument stacks */
grpc_arg_stack_t *grpc_arg_stack_new(int max_size);
grpc_error_t grpc_arg_stack_push_arg(grpc_arg_stack_t *stack, void *arg);
void *grpc_arg_stack_pop_arg(grpc_arg_stack_t *stack);
grpc_error_t grpc_arg_stack_destruct(grpc_arg_stack_t *stack);

/* Asynchronous control and waiting */
grpc_error_t grpc_probe(grpc_sessionid_t session_id);
grpc_error_t grpc_probe_or(grpc_sessionid_t *ids, size_t length, grpc_sessionid_t *id_ptr);
grpc_error_t grpc_cancel(grpc_sessionid_t session_id);
grpc_error_t grpc_cancel_all(void);
grpc_error_t grpc_wait(grpc_sessionid_t session_id);
grpc_error_t grpc_wait_and(grpc_sessionid_t *ids, size_t length);
grpc_error_t grpc_wait_or(grpc_sessionid_t *ids, size_t length, grpc_sessionid_t *id_ptr);
grpc_error_t grpc_wait_all(void);
grpc_error_t grpc_wait_any(grpc_sessionid_t *id_ptr);

/* Errors */
/* Static text: do not modify or free it (char *, not const, as GFD.52 declares it). */
char *grpc_error_string(grpc_error_t error_code);
grpc_error_t grpc_get_error(grpc_sessionid_t session_id);
grpc_error_t grpc_get_last_error(void);
grpc_error_t grpc_get_failed_sessionid(grpc_sessionid_t *session_id);

/* gridwise's own: what went wrong in this thread's last failed GridRPC call, in words
 * (the code says which kind of error, this says what exactly and what to do). The text
 * stays valid until the thread's next GridRPC call. */
const char *gridwise_last_error_message(void);

#ifdef __cplusplus
}
#endif

#endif /* GRIDWISE_GRPC_H */
