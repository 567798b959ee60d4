#!/usr/bin/python3
"""Reads a TensorBoard event file with Google's protobuf library (Debian's python3-protobuf), independently of our
C++ encoder: TFRecord frames with masked CRC-32C checked, each record parsed as tensorflow.Event (its descriptor
built here from tensorflow/core/util/event.proto's field numbers). Prints one line per scalar: step tag value.
Usage: read_tfevents.py <event file>"""
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    f = descriptor_pb2.FileDescriptorProto(name="event_check.proto", package="tensorflow", syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto
    value = f.message_type.add(name="Value")
    value.field.add(name="tag", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=T.TYPE_FLOAT, label=T.LABEL_OPTIONAL)
    summary = f.message_type.add(name="Summary")
    summary.field.add(name="value", number=1, type=T.TYPE_MESSAGE, type_name=".tensorflow.Value",
                      label=T.LABEL_REPEATED)
    event = f.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=T.TYPE_DOUBLE, label=T.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    event.field.add(name="summary", number=5, type=T.TYPE_MESSAGE, type_name=".tensorflow.Summary",
                    label=T.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.MessageFactory(pool).GetPrototype(pool.FindMessageTypeByName("tensorflow.Event"))


def main(path):
    Event = event_class()
    data = open(path, "rb").read()
    i, first = 0, True
    while i < len(data):
        header = data[i:i + 8]
        (n,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[i + 8:i + 12])
        assert length_crc == masked(header), "bad length crc at byte %d" % i
        body = data[i + 12:i + 12 + n]
        (body_crc,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
        assert body_crc == masked(body), "bad data crc at byte %d" % i
        i += 16 + n
        event = Event()
        event.ParseFromString(body)
        if first:
            assert event.file_version == "brain.Event:2", event
            first = False
            continue
        for v in event.summary.value:
            print(event.step, v.tag, repr(v.simple_value))


if __name__ == "__main__":
    main(sys.argv[1])
