#ifndef KQUERY_CEDITLINE_SHIM_H
#define KQUERY_CEDITLINE_SHIM_H
#include <stdio.h>
#include <editline/readline.h>

/// Swift 6 refuses to assign libedit's completion hook (a mutable C global) directly.
static inline void cedit_set_completion(rl_completion_func_t *function) {
    rl_attempted_completion_function = function;
}
#endif
