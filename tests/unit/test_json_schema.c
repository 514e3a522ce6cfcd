/* test_json_schema.c — JSON output by a schema (json_schema.c compiling,
 * json_mask.c's automaton following it):
 *   - schemas outside the subset, or that nothing satisfies, are refused
 *     with a message naming the keyword or the reason;
 *   - documents the schema accepts are accepted whole (complete only at the
 *     end), documents it refuses are refused by the first bad byte;
 *   - random walks over the accepted bytes (steered to close) never get
 *     stuck and end in documents that jansson reads and that a separate
 *     validator written here from JSON Schema's rules accepts — recursive
 *     schemas driven to the nesting bound included. */
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "json_mask.h"
#include "json_schema.h"
#include "testutil.h"

/* The compiled schema, or NULL with SD_ERR_ARG and a message in err. */
static sd_json_schema *compile_text(const char *text, char *err, size_t errlen)
{
    sd_json_schema *s;
    err[0] = '\0';
    sd_status st = sd_json_schema_parse(text, strlen(text), &s, err, errlen);
    ck_assert_msg(st == SD_OK ? s != NULL : st == SD_ERR_ARG && !s && err[0], "%s: status %d", text, st);
    return s;
}

/* ---- refused schemas ------------------------------------------------------------------------ */

static const struct {
    const char *schema, *msg;
} BAD[] = {
    {"{\"type\": \"string\", \"pattern\": \"x\"}", "'pattern' is not supported"},
    {"false", "accepts nothing"},
    {"[1]", "must be an object or a boolean"},
    {"{\"$ref\": \"http://example.com/s.json\"}", "not in this schema"},
    {"{\"$ref\": \"#/nope\"}", "points nowhere"},
    {"{\"anyOf\": [{\"type\": \"object\"}, {\"properties\": {\"a\": {}}}]}", "need a discriminator"},
    {"{\"anyOf\": [{\"properties\": {\"t\": {\"const\": \"a\"}}, \"required\": [\"t\"]}, {\"properties\": {\"t\": "
     "{\"enum\": [\"b\", \"a\"]}}, \"required\": [\"t\"]}]}",
     "need a discriminator"},
    {"{\"anyOf\": [{\"properties\": {\"t\": {\"const\": \"a\"}}, \"required\": [\"t\"]}, {\"properties\": {\"t\": "
     "{\"const\": \"b\"}}}]}",
     "need a discriminator"},
    {"{\"anyOf\": [{\"properties\": {\"t\": {\"const\": \"a\"}}, \"required\": [\"t\"]}, {\"properties\": {\"t\": "
     "{\"const\": 2}}, \"required\": [\"t\"]}]}",
     "need a discriminator"},
    {"{\"anyOf\": [{}, {\"properties\": {\"t\": {\"const\": \"a\"}}, \"required\": [\"t\"]}]}", "may begin with '{'"},
    {"{\"anyOf\": [{\"type\": \"string\"}, {\"enum\": [\"x\"]}]}", "may begin with '\"'"},
    {"{\"type\": \"object\", \"properties\": {\"a\": {\"$ref\": \"#\"}}, \"required\": [\"a\"]}", "within 32"},
    {"{\"type\": \"array\", \"minItems\": 3, \"maxItems\": 2}", "'minItems' exceeds 'maxItems'"},
    {"{\"type\": \"string\", \"minLength\": -1}", "non-negative"},
    {"{\"type\": \"string\", \"minLength\": 3, \"maxLength\": 2}", "'minLength' exceeds"},
    {"{\"enum\": []}", "no enum value"},
    {"{\"type\": \"integer\", \"enum\": [\"a\", 1.5]}", "no enum value is of the schema's type"},
    {"{\"properties\": {\"a\": {}}, \"required\": [\"b\"]}", "required property 'b' is not allowed"},
    {"{\"type\": \"blob\"}", "unknown type 'blob'"},
    {"{\"$ref\": \"#/$defs/a\", \"$defs\": {\"a\": {\"$ref\": \"#/$defs/a\"}}}", "$ref hops"},
    {"{\"allOf\": [{}, {}]}", "'allOf' with other than one schema"},
    {"{\"type\": \"object\", \"minProperties\": 1}", "'minProperties' is not supported"},
    {"{\"type\": \"string\", \"anyOf\": [{\"maxLength\": 2}]}", "beside 'anyOf'"},
    {"{\"properties\": {\"a\\u0001\": {}}}", "control character"},
    {"{\"items\": [{}]}", "tuples"},
    {"{\"anyOf\": [{\"anyOf\": [{\"type\": \"null\"}, {\"$ref\": \"#\"}]}]}", "anyOf nested in itself"},
    {"{\"type\": \"array\", \"items\": false, \"minItems\": 1}", "'items': false"},
    {"{\"const\": 1, \"enum\": [1]}", "'const' beside 'enum'"},
    {"{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"string\", \"format\": \"date\", "
     "\"multipleOf\": 2}}}",
     "#/properties/x: the keyword 'multipleOf'"},
    {"{\"type\": \"number\", \"minimum\": 0.5}", "must be whole numbers"},
    {"{\"maximum\": 1.5}", "must be whole numbers"}, /* no type: a number */
    {"{\"type\": \"number\", \"exclusiveMinimum\": 1, \"exclusiveMaximum\": 1}", "no number lies within"},
    {"{\"type\": \"number\", \"minimum\": 1, \"exclusiveMaximum\": 1}", "no number lies within"},
    {"{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 4}", "no integer lies within"},
    {"{\"type\": \"integer\", \"exclusiveMinimum\": 2, \"exclusiveMaximum\": 3}", "no integer lies within"},
    {"{\"type\": \"integer\", \"minimum\": 2.5, \"maximum\": 2.9}", "no integer lies within"},
    {"{\"type\": \"integer\", \"exclusiveMaximum\": -9223372036854775808}", "no integer lies within"},
    {"{\"type\": \"integer\", \"exclusiveMinimum\": true}", "must be a number"},
};

START_TEST(refused_schemas)
{
    char err[512] = "";
    sd_json_schema *s = compile_text(BAD[_i].schema, err, sizeof err);
    ck_assert_msg(!s, "compiled: %s", BAD[_i].schema);
    ck_assert_msg(strstr(err, BAD[_i].msg), "%s: got \"%s\", want \"%s\"", BAD[_i].schema, err, BAD[_i].msg);
}
END_TEST

START_TEST(too_many_properties)
{
    json_t *props = json_object();
    for (int i = 0; i < 65; i++) {
        char k[16];
        snprintf(k, sizeof k, "p%d", i);
        json_object_set_new(props, k, json_object());
    }
    json_t *sch = json_pack("{s:s, s:o}", "type", "object", "properties", props);
    char err[256];
    sd_json_schema *c;
    ck_assert_int_eq(sd_json_schema_compile(sch, &c, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(err, "more than 64 properties"), "%s", err);
    json_decref(sch);
}
END_TEST

/* ---- documents ---------------------------------------------------------------------------------- */

static const char PERSON[] =
    "{\"$defs\": {\"Address\": {\"type\": \"object\", \"title\": \"Address\", \"properties\": {\"street\": {\"type\": "
    "\"string\", \"maxLength\": 12}, \"zip\": {\"type\": \"integer\"}}, \"required\": [\"street\"]}},"
    " \"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"minLength\": 1, \"maxLength\": 8},"
    " \"age\": {\"type\": \"integer\"}, \"score\": {\"type\": \"number\"}, \"ok\": {\"type\": \"boolean\"},"
    " \"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\", \"enum\": [\"a\", \"bb\", \"a\\\"c\", 3]},"
    " \"minItems\": 1, \"maxItems\": 3}, \"addr\": {\"$ref\": \"#/$defs/Address\"},"
    " \"nick\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"null\"}], \"default\": null},"
    " \"kind\": {\"const\": \"person\"}, \"when\": {\"type\": \"string\", \"format\": \"date-time\"}},"
    " \"required\": [\"name\", \"age\", \"kind\"]}";
static const char TREE[] = "{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": "
                           "\"integer\"}, \"kids\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/node\"}}},"
                           " \"required\": [\"v\"]}}, \"$ref\": \"#/$defs/node\"}";
static const char ENUMS[] = "{\"type\": \"array\", \"maxItems\": 5, \"items\": {\"enum\": [1, 12, 123, -4.5, true,"
                            " null, {\"a\": [1]}, \"x\", \"\\u00e9t\\u00e9\"]}}";
static const char EXTRA[] = "{\"type\": \"object\", \"properties\": {\"id\": {\"type\": \"integer\"}},"
                            " \"additionalProperties\": {\"type\": \"string\"}, \"required\": [\"id\"]}";
static const char TYPES[] = "{\"type\": [\"object\", \"null\"], \"properties\": {\"a\": {\"type\": [\"integer\","
                            " \"number\", \"string\"]}}, \"required\": [\"a\"]}";
static const char PREFIX[] = "{\"properties\": {\"a\": {}, \"ab\": {\"type\": \"array\"}, \"abc\": true}}";
static const char INT[] = "{\"type\": \"integer\"}";
/* integers under bounds: [18, 120]; (-5, 5.5) = [-4, 5]; at least a million; [-9, -3] */
static const char BOUNDS[] =
    "{\"type\": \"object\", \"properties\": {\"age\": {\"type\": \"integer\", \"minimum\": 18, \"maximum\": 120}, "
    "\"t\": {\"type\": \"integer\", \"exclusiveMinimum\": -5, \"exclusiveMaximum\": 5.5}, \"big\": {\"type\": "
    "[\"integer\", \"null\"], \"minimum\": 1000000}, \"neg\": {\"type\": \"integer\", \"minimum\": -9.5, "
    "\"maximum\": -3}}, \"required\": [\"age\"]}";
/* numbers under whole-number bounds: [0, 1]; (0, 3); [-2, 0) */
static const char FLOATS[] =
    "{\"type\": \"object\", \"properties\": {\"p\": {\"type\": \"number\", \"minimum\": 0, \"maximum\": 1}, "
    "\"q\": {\"type\": \"number\", \"exclusiveMinimum\": 0, \"exclusiveMaximum\": 3.0}, \"r\": {\"type\": "
    "\"number\", \"minimum\": -2, \"exclusiveMaximum\": 0}}}";
static const char SMALL[] = "{\"type\": \"integer\", \"minimum\": 3, \"maximum\": 7}";
/* a discriminated union (the property "type" first picks the object), and null */
static const char PETS[] =
    "{\"type\": \"array\", \"items\": {\"anyOf\": [{\"type\": \"object\", \"properties\": {\"type\": {\"const\": "
    "\"cat\"}, \"lives\": {\"type\": \"integer\"}}, \"required\": [\"type\", \"lives\"]}, {\"$ref\": \"#/$defs/dog\"}, "
    "{\"type\": \"null\"}]}, \"$defs\": {\"dog\": {\"type\": \"object\", \"properties\": {\"bark\": {\"type\": "
    "\"boolean\"}, \"type\": {\"enum\": [\"dog\", \"do\"]}, \"pups\": {\"type\": \"array\", \"items\": "
    "{\"$ref\": \"#/$defs/dog\"}}}, \"required\": [\"type\"]}}}";

static const struct {
    const char *schema, *doc;
    bool good;
} DOCS[] = {
    {PERSON, "{\"name\":\"Al\",\"age\":3,\"kind\":\"person\"}", true},
    {PERSON,
     "{ \"kind\" : \"person\", \"age\": -0, \"name\": \"\\u00e9x\\n\", \"score\": 1.5e3, "
     "\"ok\": false }",
     true},
    {PERSON,
     "{\"name\":\"x\",\"age\":1,\"kind\":\"person\",\"tags\":[\"a\\\"c\", \"bb\"],\"nick\":null,"
     "\"addr\":{\"zip\":7,\"street\":\"\"},\"when\":\"today\"}",
     true},
    {PERSON, "{\"name\":\"Al\",\"age\":3}", false}, /* kind required */
    {PERSON, "{\"name\":\"\",", false},             /* minLength */
    {PERSON, "{\"name\":\"123456789\"", false},     /* maxLength */
    {PERSON, "{\"name\":\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"", false},
    {PERSON, "{\"age\":1.5", false}, /* integer */
    {PERSON, "{\"age\":1e3", false},
    {PERSON, "{\"name\":\"a\",\"name\"", false},      /* once */
    {PERSON, "{\"zzz\"", false},                      /* undeclared */
    {PERSON, "{\"tags\":[]", false},                  /* minItems */
    {PERSON, "{\"tags\":[\"a\",\"a\",\"a\",", false}, /* maxItems */
    {PERSON, "{\"tags\":[3", false},                  /* enum value not of the type */
    {PERSON, "{\"nick\":1", false},
    {PERSON, "{\"kind\":\"persona\"", false},
    {PERSON, "{\"addr\":{\"zip\":1}", false}, /* street required */
    {PERSON, " {", false},                    /* nothing before the value */
    {PERSON, "[", false},
    {TREE, "{\"v\":1,\"kids\":[{\"v\":2},{\"kids\":[],\"v\":3}]}", true},
    {TREE, "{\"kids\":[{\"v\":2}]}", false},
    {ENUMS, "[1,12,123,-4.5,true]", true},
    {ENUMS, "[ {\"a\":[1]} , \"x\" , null, \"\xc3\xa9t\xc3\xa9\"]", true},
    {ENUMS, "[{\"a\": [1]}", false}, /* enum values are compact */
    {ENUMS, "[1,2", false},
    {ENUMS, "[1,1234", false},
    {ENUMS, "[null,\"x\",1,1,1,", false},
    {EXTRA, "{\"id\":1,\"x\":\"y\",\"z\":\"w\"}", true},
    {EXTRA, "{\"x\":\"y\"}", false},
    {EXTRA, "{\"id\":1,\"x\":2", false},
    {EXTRA, "{\"id\":1,\"id\"", false},
    {EXTRA, "{\"i\\u0064\"", false}, /* equal names: equal texts */
    {EXTRA, "{\"\\/\"", false},
    {TYPES, "null", true},
    {TYPES, "{\"a\":1}", true},
    {TYPES, "{\"a\":1.5}", true},
    {TYPES, "{\"a\":\"s\"}", true},
    {TYPES, "{\"a\":true", false},
    {TYPES, "{}", false},
    {PREFIX, "{\"ab\":[1,{}],\"a\":2,\"abc\":{\"x\":[null]}}", true},
    {PREFIX, "{}", true},
    {PREFIX, "{\"abcd\"", false},
    {PREFIX, "{\"ab\":{", false},
    {PREFIX, "{\"a\":1,\"a\"", false},
    {PETS, "[{\"type\":\"cat\",\"lives\":9},{ \"type\" : \"do\" , \"bark\":true},null,{\"type\":\"dog\"}]", true},
    {PETS, "[{\"type\":\"dog\",\"pups\":[{\"type\":\"do\",\"pups\":[]}]}]", true},
    {PETS, "[{\"lives\"", false}, /* the discriminator first */
    {PETS, "[{\"type\":\"cat\",\"bark\"", false},
    {PETS, "[{\"type\":\"cat\"}", false}, /* lives required */
    {PETS, "[{\"type\":\"cow\"", false},
    {PETS, "[{\"type\":\"dog\",\"type\"", false},
    {PETS, "[{}", false},
    /* an object without declared properties compiles with no items at all (fuzzing found the empty list's
     * null pointer arithmetic) */
    {"{\"type\": \"object\", \"additionalProperties\": {\"type\": \"boolean\"}}", "{\"a\": true, \"b\": false}", true},
    {"{\"type\": \"object\", \"additionalProperties\": {\"type\": \"boolean\"}}", "{\"a\": 1", false},
    {INT, "-12", true},
    {INT, "0", true},
    {INT, "1.5", false},
    {INT, "01", false},
    {INT, " 1", false},
    {BOUNDS, "{\"age\":18,\"t\":-4,\"big\":1000000,\"neg\":-9}", true},
    {BOUNDS, "{\"age\": 120 , \"t\":5,\"big\":null,\"neg\":-3}", true},
    {BOUNDS, "{\"age\":99,\"t\":-0,\"big\":9223372036854775807}", true},
    {BOUNDS, "{\"age\":17", false}, /* refused at the 7: no 17x fits */
    {BOUNDS, "{\"age\":121", false},
    {BOUNDS, "{\"age\":0", false},
    {BOUNDS, "{\"age\":-", false},
    {BOUNDS, "{\"age\":1}", false}, /* 1 cannot end */
    {BOUNDS, "{\"age\":1 ", false},
    {BOUNDS, "{\"age\":20,\"t\":-5", false},
    {BOUNDS, "{\"age\":20,\"t\":6", false},
    {BOUNDS, "{\"age\":20,\"t\":10", false},
    {BOUNDS, "{\"age\":20,\"big\":999999}", false},
    {BOUNDS, "{\"age\":20,\"big\":92233720368547758070", false}, /* beyond int64 */
    {BOUNDS, "{\"age\":20,\"neg\":-2", false},
    {BOUNDS, "{\"age\":20,\"neg\":-10", false},
    {BOUNDS, "{\"age\":20,\"neg\":3", false},
    {BOUNDS, "{\"age\":20.5", false},
    {FLOATS, "{\"p\":0,\"q\":0.5,\"r\":-2}", true},
    {FLOATS, "{\"p\":1.0,\"q\":2.999,\"r\":-0.001}", true},
    {FLOATS, "{\"p\":0.25,\"q\":0.0001,\"r\":-1.5}", true},
    {FLOATS, "{\"p\":1.000,\"r\":-2.00}", true},
    {FLOATS, "{\"p\":1.5", false}, /* refused at the 5 */
    {FLOATS, "{\"p\":1.0001", false},
    {FLOATS, "{\"p\":2", false},
    {FLOATS, "{\"p\":-", false},
    {FLOATS, "{\"p\":0.5e", false}, /* no exponent under bounds */
    {FLOATS, "{\"q\":0}", false},   /* 0 excluded */
    {FLOATS, "{\"q\":0.00}", false},
    {FLOATS, "{\"q\":3", false},
    {FLOATS, "{\"r\":0", false},
    {FLOATS, "{\"r\":-0}", false},
    {FLOATS, "{\"r\":-0.0}", false},
    {FLOATS, "{\"r\":-2.5", false},
    {FLOATS, "{\"r\":-3", false},
    {SMALL, "5", true},
    {SMALL, "3", true},
    {SMALL, "8", false},
    {SMALL, "2", false},
    {SMALL, "50", false},
};

START_TEST(documents)
{
    char err[256];
    sd_json_schema *s = compile_text(DOCS[_i].schema, err, sizeof err);
    ck_assert_msg(s, "%s", err);
    const char *doc = DOCS[_i].doc;
    size_t n = strlen(doc);
    sd_json_state st;
    sd_json_init_schema(&st, s);
    size_t i = 0;
    for (; i < n; i++) {
        if (!sd_json_feed(&st, doc + i, 1)) break;
        if (i + 1 < n && (doc[0] == '{' || doc[0] == '['))
            ck_assert_msg(!sd_json_complete(&st), "%s complete after %zu bytes", doc, i + 1);
    }
    if (DOCS[_i].good) {
        ck_assert_msg(i == n, "%s refused at byte %zu", doc, i);
        ck_assert_msg(sd_json_complete(&st), "%s not complete", doc);
    } else {
        ck_assert_msg(i < n, "%s accepted", doc);
    }
    sd_json_schema_free(s);
}
END_TEST

/* ---- a validator from JSON Schema's rules (the subset) -------------------------------------- */

static const json_t *deref(const json_t *root, const json_t *sch)
{
    const char *ref = json_string_value(json_object_get(sch, "$ref"));
    if (!ref) return sch;
    const json_t *v = root;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", ref + 1);
    for (char *save = NULL, *tok = strtok_r(buf, "/", &save); tok; tok = strtok_r(NULL, "/", &save))
        v = json_object_get(v, tok);
    return deref(root, v);
}

static size_t utf8_chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static bool valid(const json_t *root, const json_t *sch, const json_t *v);

static bool type_ok(const char *t, const json_t *v)
{
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "integer")) return json_is_integer(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    return !strcmp(t, "null") && json_is_null(v);
}

static bool object_ok(const json_t *root, const json_t *sch, const json_t *v)
{
    json_t *props = json_object_get(sch, "properties"), *extra = json_object_get(sch, "additionalProperties"), *x;
    const char *k;
    size_t i;
    json_array_foreach(json_object_get(sch, "required"), i,
                       x) if (!json_object_get(v, json_string_value(x))) return false;
    json_object_foreach((json_t *)v, k, x)
    {
        json_t *p = json_object_get(props, k);
        if (p && !valid(root, p, x)) return false;
        if (!p && props && (!extra || json_is_false(extra))) return false;
        if (!p && json_is_object(extra) && !valid(root, extra, x)) return false;
    }
    return true;
}

static bool array_ok(const json_t *root, const json_t *sch, const json_t *v)
{
    json_t *items = json_object_get(sch, "items"), *x;
    json_t *lo = json_object_get(sch, "minItems"), *hi = json_object_get(sch, "maxItems");
    size_t i;
    if (lo && json_array_size(v) < (size_t)json_integer_value(lo)) return false;
    if (hi && json_array_size(v) > (size_t)json_integer_value(hi)) return false;
    json_array_foreach((json_t *)v, i, x) if (items && !valid(root, items, x)) return false;
    return true;
}

/* minimum / maximum / exclusiveMinimum / exclusiveMaximum, as JSON Schema
 * states them (numbers compared as doubles: the tests' bounds are exact). */
static bool bounds_ok(const json_t *sch, double x)
{
    json_t *b;
    if ((b = json_object_get(sch, "minimum")) && x < json_number_value(b)) return false;
    if ((b = json_object_get(sch, "maximum")) && x > json_number_value(b)) return false;
    if ((b = json_object_get(sch, "exclusiveMinimum")) && x <= json_number_value(b)) return false;
    if ((b = json_object_get(sch, "exclusiveMaximum")) && x >= json_number_value(b)) return false;
    return true;
}

static bool valid(const json_t *root, const json_t *sch, const json_t *v)
{
    sch = deref(root, sch);
    if (json_is_true(sch)) return true;
    json_t *any = json_object_get(sch, "anyOf"), *e, *t = json_object_get(sch, "type");
    size_t i;
    if (!any) any = json_object_get(sch, "oneOf");
    if (any) {
        json_array_foreach(any, i, e) if (valid(root, e, v)) return true;
        return false;
    }
    json_t *en = json_object_get(sch, "enum"), *c = json_object_get(sch, "const");
    if (c && !json_equal(c, v)) return false;
    if (en) {
        bool hit = false;
        json_array_foreach(en, i, e) hit |= json_equal(e, v);
        if (!hit) return false;
    }
    if (json_is_string(t) && !type_ok(json_string_value(t), v)) return false;
    if (json_is_array(t)) {
        bool hit = false;
        json_array_foreach(t, i, e) hit |= type_ok(json_string_value(e), v);
        if (!hit) return false;
    }
    if (json_is_object(v) && !object_ok(root, sch, v)) return false;
    if (json_is_array(v) && !array_ok(root, sch, v)) return false;
    if (json_is_number(v) && !bounds_ok(sch, json_number_value(v))) return false;
    json_t *lo = json_object_get(sch, "minLength"), *hi = json_object_get(sch, "maxLength");
    if (json_is_string(v) && lo && utf8_chars(json_string_value(v)) < (size_t)json_integer_value(lo)) return false;
    if (json_is_string(v) && hi && utf8_chars(json_string_value(v)) > (size_t)json_integer_value(hi)) return false;
    return true;
}

/* ---- random walks -------------------------------------------------------------------------------- */

/* A walk over the accepted bytes; after `open` steps it prefers bytes that
 * close what is open. 0 when stuck (no byte accepted, not complete). */
static size_t walk(const sd_json_schema *s, unsigned *seed, char *out, size_t cap, size_t open)
{
    static const char closing[] = "\"}],0:";
    sd_json_state st;
    sd_json_init_schema(&st, s);
    size_t n = 0;
    while (!sd_json_complete(&st) && n + 1 < cap) {
        /* sometimes a property name or an enum value whole, where it may come */
        uint32_t n_items = 0;
        for (uint32_t i = 0; i < s->n_nodes; i++)
            if (s->nodes[i].kind == SD_JS_OBJECT || s->nodes[i].kind == SD_JS_ENUM)
                n_items = s->nodes[i].items + s->nodes[i].n > n_items ? s->nodes[i].items + s->nodes[i].n : n_items;
        const sd_js_item *it = n_items ? &s->items[rand_r(seed) % n_items] : NULL;
        sd_json_state b = st;
        if (it && it->len && rand_r(seed) % 3 == 0 && n + it->len + 1 < cap &&
            sd_json_feed(&b, s->text + it->text, it->len)) {
            st = b;
            memcpy(out + n, s->text + it->text, it->len);
            n += it->len;
            continue;
        }
        unsigned char ok[256];
        int k = sd_json_next(&st, ok), pick = -1;
        if (k == 0) return 0;
        for (int j = 0; n > open && rand_r(seed) % 4 && closing[j] && pick < 0; j++)
            if (memchr(ok, closing[j], (size_t)k)) pick = (unsigned char)closing[j];
        /* bytes that open containers, often, before: deep documents */
        if (pick < 0 && n <= open && rand_r(seed) % 3 != 0)
            for (int j = 0; j < k && pick < 0; j++)
                if (ok[j] == '{' || ok[j] == '[' || ok[j] == '"') pick = ok[j];
        unsigned char c = pick >= 0 ? (unsigned char)pick : ok[rand_r(seed) % (unsigned)k];
        ck_assert(sd_json_feed(&st, (const char *)&c, 1));
        out[n++] = (char)c;
    }
    out[n] = 0;
    return sd_json_complete(&st) ? n : 0;
}

static const char *const WALKED[] = {PERSON, TREE, ENUMS, EXTRA, TYPES, PREFIX, INT, PETS, BOUNDS, SMALL, FLOATS};

START_TEST(walks_validate)
{
    char err[256];
    sd_json_schema *s = compile_text(WALKED[_i], err, sizeof err);
    ck_assert_msg(s, "%s", err);
    json_t *sch = json_loads(WALKED[_i], 0, NULL);
    unsigned seed = 7 + (unsigned)_i;
    static char buf[1 << 16];
    int parsed = 0, deep = 0;
    for (int w = 0; w < 300; w++) {
        size_t n = walk(s, &seed, buf, sizeof buf, (size_t)(rand_r(&seed) % (w % 4 ? 400 : 3000)));
        size_t len = strlen(buf);
        ck_assert_msg(n > 0, "walk %d got stuck (%zu bytes): ...%s", w, len, buf + (len > 200 ? len - 200 : 0));
        json_error_t e;
        json_t *v = json_loadb(buf, n, JSON_DECODE_ANY, &e);
        ck_assert_msg(v || strstr(e.text, "too big") || strstr(e.text, "overflow"), "walk %d: %s: %.400s", w, e.text,
                      buf);
        if (!v) continue;
        parsed++;
        ck_assert_msg(valid(sch, sch, v), "walk %d is not valid: %.400s", w, buf);
        int d = 0, dmax = 0;
        for (size_t i = 0; i < n; i++)
            dmax = (d += buf[i] == '{' || buf[i] == '[') > dmax ? d : dmax, d -= buf[i] == '}' || buf[i] == ']';
        deep += dmax >= SD_JSON_MAX_DEPTH - 2;
        json_decref(v);
    }
    ck_assert_int_gt(parsed, 250);
    if (WALKED[_i] == TREE) ck_assert_int_gt(deep, 0); /* the bound was reached, and the walks still ended */
    json_decref(sch);
    sd_json_schema_free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("json_schema");
    TCase *tc = tcase_create("compile");
    tcase_add_loop_test(tc, refused_schemas, 0, (int)(sizeof BAD / sizeof BAD[0]));
    tcase_add_test(tc, too_many_properties);
    suite_add_tcase(s, tc);
    TCase *ta = tcase_create("automaton");
    tcase_add_loop_test(ta, documents, 0, (int)(sizeof DOCS / sizeof DOCS[0]));
    tcase_add_loop_test(ta, walks_validate, 0, (int)(sizeof WALKED / sizeof WALKED[0]));
    suite_add_tcase(s, ta);
    return tu_run_suite(s);
}
