/* The 43 reference tokenizations (tests/golden/tokenizer/llama31_tokenize.json, made by
 * @huggingface/tokenizers from the same tokenizer.json): exact ids, and decode gives the
 * text back byte for byte. */
#include <json-c/json.h>

#include "tok_test.h"

int main(int argc, char **argv)
{
    l8tok *tok = tt_load(argc, argv);
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER_JSON GOLDEN_JSON\n", argv[0]);
        return 1;
    }
    json_object *root = json_object_from_file(argv[2]);
    json_object *cases = NULL;
    if (!root || !json_object_object_get_ex(root, "cases", &cases) ||
        !json_object_is_type(cases, json_type_array)) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 1;
    }
    size_t n_cases = json_object_array_length(cases);
    CHECK(n_cases == 43, "expected the 43 golden cases, file has %zu", n_cases);
    size_t n_ids_total = 0;
    for (size_t c = 0; c < n_cases; c++) {
        json_object *cs = json_object_array_get_idx(cases, c), *jt, *jids;
        json_object_object_get_ex(cs, "text", &jt);
        json_object_object_get_ex(cs, "ids", &jids);
        const char *text = json_object_get_string(jt);
        size_t len = (size_t)json_object_get_string_len(jt);
        size_t n = json_object_array_length(jids);
        uint32_t *want = malloc((n ? n : 1) * sizeof(*want));
        for (size_t i = 0; i < n; i++)
            want[i] = (uint32_t)json_object_get_int64(json_object_array_get_idx(jids, i));
        n_ids_total += n;

        l8tok_ids got = {0};
        int rc = l8tok_encode(tok, text, len, L8TOK_ENCODE_DEFAULT, &got);
        CHECK(rc == 0, "case %zu: encode rc %d", c, rc);
        if (!tt_ids_eq(&got, want, n)) {
            CHECK(0, "case %zu: ids differ for %.60s", c, text);
            tt_print_ids("want", want, n);
            tt_print_ids("got ", got.ids, got.n);
        }
        /* Twice: the second encode goes through the word cache. */
        got.n = 0;
        rc = l8tok_encode(tok, text, len, L8TOK_ENCODE_DEFAULT, &got);
        CHECK(rc == 0 && tt_ids_eq(&got, want, n), "case %zu: second (cached) encode differs", c);

        char *dec = NULL;
        size_t dl = 0;
        rc = l8tok_decode(tok, want, n, &dec, &dl);
        CHECK(rc == 0 && dl == len && memcmp(dec, text, len) == 0 && dec[dl] == 0,
              "case %zu: decode does not give the text back", c);
        free(dec);
        l8tok_ids_free(&got);
        free(want);
    }
    printf("%zu cases, %zu ids\n", n_cases, n_ids_total);
    json_object_put(root);
    l8tok_free(tok);
    return t_result("test_golden");
}
