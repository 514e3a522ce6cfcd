/* jinja_ast.h — the parsed form of a template (private to jinja.c, which
 * parses, and jinja_eval.c, which renders). */
#ifndef SD_ROUTER_JINJA_AST_H
#define SD_ROUTER_JINJA_AST_H

#include <jansson.h>
#include <stddef.h>

typedef enum {
    /* statements */
    J_TEXT,
    J_OUT,
    J_IF,
    J_FOR,
    J_SET,
    J_SETBLOCK,
    /* expressions */
    J_LIT,
    J_NAME,
    J_ATTR,
    J_ITEM,
    J_SLICE,
    J_CALL,
    J_FILTER,
    J_TEST,
    J_NOT,
    J_NEG,
    J_BIN,
    J_AND,
    J_OR,
    J_COND,
    J_LIST,
    J_DICT,
} j_kind;

typedef enum {
    OP_ADD,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_FLOORDIV,
    OP_MOD,
    OP_POW,
    OP_CONCAT,
    OP_EQ,
    OP_NE,
    OP_LT,
    OP_LE,
    OP_GT,
    OP_GE,
    OP_IN,
    OP_NOTIN
} j_op;

typedef struct j_node j_node;

typedef struct j_list {
    j_node **v;
    size_t n, cap;
} j_list;

/* One node. Which fields mean what, by kind:
 *   J_TEXT     text / len
 *   J_OUT      a: the expression
 *   J_IF       a: condition; body; els (an elif is one J_IF in els)
 *   J_FOR      name (, name2: `for k, v in`); a: iterable; b: `if` filter or NULL; body; els
 *   J_SET      name (, name2: `set ns.attr`); a: value
 *   J_SETBLOCK name; body
 *   J_LIT      lit
 *   J_NAME     name
 *   J_ATTR     a . name
 *   J_ITEM     a [ b ]
 *   J_SLICE    a [ b : c : d ] (b, c, d may be NULL)
 *   J_CALL     a ( args, kw = kwargs )
 *   J_FILTER   a | name ( args, kw ) — a NULL for the first filter of a filter block
 *   J_TEST     a is [not: negate] name ( args )
 *   J_NOT, J_NEG  a
 *   J_BIN      a op b;  J_AND / J_OR: a, b
 *   J_COND     b if a else c (c may be NULL)
 *   J_LIST     args;  J_DICT: args (keys), kwargs (values) */
struct j_node {
    j_kind kind;
    j_op op;
    int line;
    int negate;
    char *name, *name2;
    char *text;
    size_t len;
    json_t *lit;
    j_node *a, *b, *c, *d;
    j_list args, kwargs;
    char **kw; /* keyword names of kwargs (J_CALL, J_FILTER) */
    j_list body, els;
    int height; /* expressions: 1 + the tallest operand (bounds eval / free recursion) */
};

struct sd_jinja {
    j_list root;
};

#endif
