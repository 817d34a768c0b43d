"""Shared by the test tools that write a GGUF file from another: the metadata copied over."""
import gguf


def copy_fields(reader: gguf.GGUFReader, writer: gguf.GGUFWriter) -> None:
    """Every key of `reader` into `writer` as it is (the tokenizer and chat template with
    them), but the file's own GGUF.* fields and the architecture, which the writer was made
    with."""
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
