/* Provokes every GridRPC error code a program can meet and checks the code it gets: what a
 * GFD.52 program relies on when it handles errors. Prints one line per code. */
#include <string.h>

#include "check.h"

static const char *const NAMES[] = {
    "GRPC_NO_ERROR",          "GRPC_NOT_INITIALIZED",      "GRPC_CONFIGFILE_NOT_FOUND",
    "GRPC_CONFIGFILE_ERROR",  "GRPC_SERVER_NOT_FOUND",     "GRPC_FUNCTION_NOT_FOUND",
    "GRPC_INVALID_FUNCTION_HANDLE", "GRPC_INVALID_SESSION_ID", "GRPC_RPC_REFUSED",
    "GRPC_COMMUNICATION_FAILED", "GRPC_SESSION_FAILED",    "GRPC_NOT_COMPLETED",
    "GRPC_NONE_COMPLETED",    "GRPC_OTHER_ERROR_CODE",     "GRPC_UNKNOWN_ERROR_CODE",
    "GRPC_ALREADY_INITIALIZED",
};

static int failures = 0;

static const char *name(grpc_error_t e) {
    return e >= 0 && e < GRPC_LAST_ERROR_CODE ? NAMES[e] : "(not a code)";
}

static void expect(const char *what, grpc_error_t got, grpc_error_t want) {
    if (got != want) {
        fprintf(stderr, "FAIL %s: got %s, expected %s (%s)\n", what, name(got), name(want),
                gridwise_last_error_message());
        failures++;
    } else {
        printf("%-30s %s\n", name(want), what);
    }
}

/* Initialises with `config`; if that works, the first call must give the error instead. */
static grpc_error_t first_error(const char *config) {
    grpc_function_handle_t h;
    grpc_error_t e = grpc_initialize(config);
    if (e == GRPC_NO_ERROR) {
        e = grpc_function_handle_default(&h, "add");
        grpc_finalize();
    }
    return e;
}

int main(int argc, char **argv) {
    USAGE(argc, argv, 5, "CONFIG WRONG_TOKEN_CONFIG DEAD_AGENT_CONFIG BROKEN_CONFIG");
    grpc_function_handle_t add, fail, sleeper, h;
    grpc_sessionid_t id, other;
    int y = 0;
    double slept = 0.0;

    expect("a handle before grpc_initialize", grpc_function_handle_default(&h, "add"),
           GRPC_NOT_INITIALIZED);
    {
        /* A handle never initialised (zeroed, as a static one is) before grpc_initialize: the
           missing initialisation is the error, not the handle. */
        grpc_function_handle_t zeroed;
        grpc_sessionid_t none;
        memset(&zeroed, 0, sizeof zeroed);
        expect("a call on a zeroed handle before grpc_initialize", grpc_call(&zeroed, 1, 2, &y),
               GRPC_NOT_INITIALIZED);
        expect("an async call on it", grpc_call_async(&zeroed, &none, 1, 2, &y),
               GRPC_NOT_INITIALIZED);
        expect("destructing it", grpc_function_handle_destruct(&zeroed), GRPC_NOT_INITIALIZED);
    }
    expect("grpc_get_last_error after it", grpc_get_last_error(), GRPC_NOT_INITIALIZED);
    expect("a configuration file that is not there", grpc_initialize("/nonexistent/gw.toml"),
           GRPC_CONFIGFILE_NOT_FOUND);
    expect("a configuration file that is not TOML", grpc_initialize(argv[4]),
           GRPC_CONFIGFILE_ERROR);
    expect("an agent that is not running", first_error(argv[3]), GRPC_COMMUNICATION_FAILED);
    expect("a wrong client token", first_error(argv[2]), GRPC_RPC_REFUSED);

    expect("grpc_initialize", grpc_initialize(argv[1]), GRPC_NO_ERROR);
    expect("grpc_initialize twice", grpc_initialize(argv[1]), GRPC_ALREADY_INITIALIZED);
    expect("a service nobody offers", grpc_function_handle_default(&h, "no_such_service"),
           GRPC_FUNCTION_NOT_FOUND);
    expect("a server nobody runs", grpc_function_handle_init(&h, "127.0.0.1:1", "add"),
           GRPC_SERVER_NOT_FOUND);

    CHECK(grpc_function_handle_default(&add, "add"));
    CHECK(grpc_function_handle_destruct(&add));
    expect("a call through a destructed handle", grpc_call(&add, 1, &y),
           GRPC_INVALID_FUNCTION_HANDLE);
    expect("destructing it again", grpc_function_handle_destruct(&add),
           GRPC_INVALID_FUNCTION_HANDLE);
    CHECK(grpc_function_handle_default(&add, "add"));

    CHECK(grpc_function_handle_default(&fail, "fail"));
    expect("a kernel that fails", grpc_call(&fail, "on purpose", &y), GRPC_SESSION_FAILED);
    CHECK(grpc_call_async(&fail, &id, "on purpose", &y));
    grpc_sessionid_t got = GRPC_SESSIONID_VOID;
    expect("grpc_wait_or on it", grpc_wait_or(&id, 1, &got), GRPC_SESSION_FAILED);
    expect(got == id ? "... which names the failed session" : "... NOT naming it",
           got == id ? GRPC_NO_ERROR : GRPC_OTHER_ERROR_CODE, GRPC_NO_ERROR);
    expect("grpc_get_error of that session", grpc_get_error(id), GRPC_SESSION_FAILED);
    CHECK(grpc_call_async(&fail, &id, "on purpose", &y));
    CHECK(grpc_call_async(&add, &other, 1, &y));
    expect("grpc_wait_all with one failure", grpc_wait_all(), GRPC_SESSION_FAILED);
    got = GRPC_SESSIONID_VOID;
    CHECK(grpc_get_failed_sessionid(&got));
    expect(got == id ? "grpc_get_failed_sessionid names it" : "grpc_get_failed_sessionid: WRONG",
           got == id ? GRPC_NO_ERROR : GRPC_OTHER_ERROR_CODE, GRPC_NO_ERROR);
    expect(y == 2 ? "... and the other call's output was written" : "... other output LOST",
           y == 2 ? GRPC_NO_ERROR : GRPC_OTHER_ERROR_CODE, GRPC_NO_ERROR);
    expect("grpc_get_error of a session that worked", grpc_get_error(other), GRPC_NO_ERROR);

    expect("grpc_wait on an id never issued", grpc_wait(99999), GRPC_INVALID_SESSION_ID);
    expect("grpc_get_error on it", grpc_get_error(99999), GRPC_INVALID_SESSION_ID);
    expect("grpc_wait twice", grpc_wait(other), GRPC_INVALID_SESSION_ID);

    CHECK(grpc_function_handle_default(&sleeper, "sleep"));
    CHECK(grpc_call_async(&sleeper, &id, 1, &slept));
    expect("grpc_probe on a running call", grpc_probe(id), GRPC_NOT_COMPLETED);
    got = 0;
    expect("grpc_probe_or on it", grpc_probe_or(&id, 1, &got), GRPC_NONE_COMPLETED);
    expect("grpc_wait for it", grpc_wait(id), GRPC_NO_ERROR);
    expect(slept >= 0.99 ? "... which slept a second" : "... which did NOT sleep",
           slept >= 0.99 ? GRPC_NO_ERROR : GRPC_OTHER_ERROR_CODE, GRPC_NO_ERROR);

    grpc_arg_stack_t *args = grpc_arg_stack_new(1);
    CHECK(grpc_arg_stack_push_arg(args, &y));
    expect("pushing past an argument stack's size", grpc_arg_stack_push_arg(args, &y),
           GRPC_OTHER_ERROR_CODE);
    expect("a call whose arguments do not fit", grpc_call_argstack(&add, args),
           GRPC_OTHER_ERROR_CODE);
    CHECK(grpc_arg_stack_destruct(args));
    expect("a NULL output pointer", grpc_call(&add, 1, (int *)0), GRPC_OTHER_ERROR_CODE);

    expect(strcmp(grpc_error_string(12345), grpc_error_string(GRPC_UNKNOWN_ERROR_CODE)) == 0
               ? "grpc_error_string of a number that is no code"
               : "grpc_error_string of a number that is no code: WRONG TEXT",
           strcmp(grpc_error_string(12345), grpc_error_string(GRPC_UNKNOWN_ERROR_CODE)) == 0
               ? GRPC_UNKNOWN_ERROR_CODE
               : GRPC_OTHER_ERROR_CODE,
           GRPC_UNKNOWN_ERROR_CODE);

    CHECK(grpc_function_handle_destruct(&add));
    CHECK(grpc_function_handle_destruct(&fail));
    CHECK(grpc_function_handle_destruct(&sleeper));
    expect("grpc_finalize", grpc_finalize(), GRPC_NO_ERROR);
    expect("grpc_finalize twice", grpc_finalize(), GRPC_NOT_INITIALIZED);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("every error code as GFD.52 says\n");
    return 0;
}
