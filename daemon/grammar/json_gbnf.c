/* json_gbnf.c - any JSON value (RFC 8259) as GBNF: `--json-object`'s and the
 * `json` kind's grammar. Whitespace between tokens is bounded as in the
 * JSON Schema translation (nothing, a space, or a newline and up to 20
 * spaces or tabs), so that a reply cannot run on in whitespace. */
#include "grammar.h"

const char l8g_json_gbnf[] =
    "root   ::= value\n"
    "value  ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( member ( \",\" ws member )* )? \"}\"\n"
    "member ::= string ws \":\" ws value ws\n"
    "array  ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "char   ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" hex hex hex hex )\n"
    "hex    ::= [0-9a-fA-F]\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    "ws     ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n";
