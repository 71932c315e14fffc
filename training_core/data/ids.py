"""The kinds of raw id: their one home (no imports, so every module may use them)."""

# The kinds of raw id a column may hold (docs/data-format.md, "Ids"). Integer ids (every
# MovieLens layout) are int64 everywhere, as before string ids existed; string ids are UTF-8
# text, kept as written (no stripping, no case folding). The reader picks a column's kind
# (``ID_AUTO``) or is told it (``--id-type``); metadata.json records each column's kind and the
# export's signatures take and return ids of that kind (tf.int64 or tf.string).
ID_INT64 = "int64"
ID_STRING = "string"
ID_KINDS = (ID_INT64, ID_STRING)
ID_AUTO = "auto"  # The reader picks each column's kind.
ID_TYPES = (ID_AUTO, *ID_KINDS)  # What --id-type accepts.
