"""netsweep's own description of the part of the Chakra execution-trace schema it reads, built at
import time with the `protobuf` runtime (no generated code, no `mlc-chakra`).

It mirrors the wire format of MLCommons Chakra's `et_def.proto` (package `ChakraProtoMsg`, proto3) for
interoperability: the same field numbers, field types and enum numbers, so the files Chakra's tools
write decode here, and messages built with these classes decode in Chakra's. It describes only what
netsweep reads: `GlobalMetadata` (version, attributes), `Node` (id, name, type, dependencies,
duration, attributes), `AttributeProto` (every value kind, as an attribute may use any of them) and
the two enums. Fields left out (a node's start time, inputs, outputs) are skipped when parsing, as
protobuf skips any field its description does not name.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_FIELD = descriptor_pb2.FieldDescriptorProto
# A package of our own, in a pool of our own: no clash with Chakra's classes in the same process
_PACKAGE = "netsweep.chakra"

# AttributeProto's value is one of these kinds: `<kind>_val` (field number n) or `<kind>_list`
# (field n + 1, a message `<Kind>List` holding `repeated <kind> values = 1`)
_ATTRIBUTE_KINDS = (
    ("double", 3, _FIELD.TYPE_DOUBLE), ("float", 5, _FIELD.TYPE_FLOAT), ("int32", 7, _FIELD.TYPE_INT32),
    ("int64", 9, _FIELD.TYPE_INT64), ("uint32", 11, _FIELD.TYPE_UINT32), ("uint64", 13, _FIELD.TYPE_UINT64),
    ("sint32", 15, _FIELD.TYPE_SINT32), ("sint64", 17, _FIELD.TYPE_SINT64), ("fixed32", 19, _FIELD.TYPE_FIXED32),
    ("fixed64", 21, _FIELD.TYPE_FIXED64), ("sfixed32", 23, _FIELD.TYPE_SFIXED32),
    ("sfixed64", 25, _FIELD.TYPE_SFIXED64), ("bool", 27, _FIELD.TYPE_BOOL), ("string", 29, _FIELD.TYPE_STRING),
    ("bytes", 31, _FIELD.TYPE_BYTES),
)
_NODE_TYPES = ("INVALID_NODE", "METADATA_NODE", "MEM_LOAD_NODE", "MEM_STORE_NODE", "COMP_NODE", "COMM_SEND_NODE",
               "COMM_RECV_NODE", "COMM_COLL_NODE")  # numbered 0, 1, 2, ...
_COLLECTIVE_COMM_TYPES = ("ALL_REDUCE", "REDUCE", "ALL_GATHER", "GATHER", "SCATTER", "BROADCAST", "ALL_TO_ALL",
                          "REDUCE_SCATTER", "REDUCE_SCATTER_BLOCK", "BARRIER")  # numbered 0, 1, 2, ...


def _add_field(message: descriptor_pb2.DescriptorProto, name: str, number: int, field_type: int,
               repeated: bool = False, type_name: str = "", oneof: int | None = None) -> None:
    field = message.field.add(name=name, number=number, type=field_type,
                              label=_FIELD.LABEL_REPEATED if repeated else _FIELD.LABEL_OPTIONAL)
    if type_name:
        field.type_name = f".{_PACKAGE}.{type_name}"
    if oneof is not None:
        field.oneof_index = oneof


def _file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(name="netsweep_chakra_et.proto", package=_PACKAGE, syntax="proto3")
    attribute = file.message_type.add(name="AttributeProto")
    attribute.oneof_decl.add(name="value")
    _add_field(attribute, "name", 1, _FIELD.TYPE_STRING)
    _add_field(attribute, "doc_string", 2, _FIELD.TYPE_STRING)
    for kind, number, field_type in _ATTRIBUTE_KINDS:
        list_name = kind.capitalize() + "List"  # DoubleList, Uint64List, Sfixed32List, BoolList, ...
        _add_field(file.message_type.add(name=list_name), "values", 1, field_type, repeated=True)
        _add_field(attribute, f"{kind}_val", number, field_type, oneof=0)
        _add_field(attribute, f"{kind}_list", number + 1, _FIELD.TYPE_MESSAGE, type_name=list_name, oneof=0)
    metadata = file.message_type.add(name="GlobalMetadata")
    _add_field(metadata, "version", 1, _FIELD.TYPE_STRING)
    _add_field(metadata, "attr", 2, _FIELD.TYPE_MESSAGE, repeated=True, type_name="AttributeProto")
    for enum_name, names in (("NodeType", _NODE_TYPES), ("CollectiveCommType", _COLLECTIVE_COMM_TYPES)):
        enum = file.enum_type.add(name=enum_name)
        for number, value_name in enumerate(names):
            enum.value.add(name=value_name, number=number)
    node = file.message_type.add(name="Node")
    _add_field(node, "id", 1, _FIELD.TYPE_UINT64)
    _add_field(node, "name", 2, _FIELD.TYPE_STRING)
    _add_field(node, "type", 3, _FIELD.TYPE_ENUM, type_name="NodeType")
    _add_field(node, "ctrl_deps", 4, _FIELD.TYPE_UINT64, repeated=True)
    _add_field(node, "data_deps", 5, _FIELD.TYPE_UINT64, repeated=True)
    _add_field(node, "duration_micros", 7, _FIELD.TYPE_UINT64)
    _add_field(node, "attr", 10, _FIELD.TYPE_MESSAGE, repeated=True, type_name="AttributeProto")
    return file


_pool = descriptor_pool.DescriptorPool()
_pool.Add(_file())

GlobalMetadata = message_factory.GetMessageClass(_pool.FindMessageTypeByName(f"{_PACKAGE}.GlobalMetadata"))
"""A trace file's first message: the schema version and attributes of the trace."""
Node = message_factory.GetMessageClass(_pool.FindMessageTypeByName(f"{_PACKAGE}.Node"))
"""One node of a rank's trace (every message after the GlobalMetadata)."""
AttributeProto = message_factory.GetMessageClass(_pool.FindMessageTypeByName(f"{_PACKAGE}.AttributeProto"))
"""A named attribute of a node: one value, of any kind in the oneof `value`."""
NODE_TYPES: dict[int, str] = {value.number: value.name
                              for value in _pool.FindEnumTypeByName(f"{_PACKAGE}.NodeType").values}
"""Chakra's NodeType: number -> name."""
COLLECTIVE_COMM_TYPES: dict[int, str] = {
    value.number: value.name for value in _pool.FindEnumTypeByName(f"{_PACKAGE}.CollectiveCommType").values}
"""Chakra's CollectiveCommType (a collective's `comm_type` attribute): number -> name."""
