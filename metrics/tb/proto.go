package tb

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The subset of TensorBoard's event.proto and summary.proto that scalars
// need, with the upstream field numbers (tensorboard/compat/proto). No
// protoc is needed: the descriptors are built here and the messages are
// dynamicpb messages, marshalled by google.golang.org/protobuf.
//
//	message Event { double wall_time = 1; int64 step = 2;
//	  oneof what { string file_version = 3; Summary summary = 5; } }
//	message Summary { repeated Value value = 1;
//	  message Value { string tag = 1; oneof value { float simple_value = 2; } } }
type descriptors struct {
	event, summary, value protoreflect.MessageDescriptor
}

func field(name string, num int32, typ descriptorpb.FieldDescriptorProto_Type, oneof *int32, typeName string) *descriptorpb.FieldDescriptorProto {
	f := &descriptorpb.FieldDescriptorProto{
		Name: proto.String(name), Number: proto.Int32(num), Type: typ.Enum(),
		Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String(name), OneofIndex: oneof,
	}
	if typeName != "" {
		f.TypeName = proto.String(typeName)
	}
	return f
}

func buildDescriptors() (descriptors, error) {
	zero := proto.Int32(0)
	values := field("value", 1, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, nil, ".tensorboard.Summary.Value")
	values.Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	fdp := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("longhaul/metrics/tb/event.proto"),
		Package: proto.String("tensorboard"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{
				Name:  proto.String("Summary"),
				Field: []*descriptorpb.FieldDescriptorProto{values},
				NestedType: []*descriptorpb.DescriptorProto{{
					Name: proto.String("Value"),
					Field: []*descriptorpb.FieldDescriptorProto{
						field("tag", 1, descriptorpb.FieldDescriptorProto_TYPE_STRING, nil, ""),
						field("simple_value", 2, descriptorpb.FieldDescriptorProto_TYPE_FLOAT, zero, ""),
					},
					OneofDecl: []*descriptorpb.OneofDescriptorProto{{Name: proto.String("value")}},
				}},
			},
			{
				Name: proto.String("Event"),
				Field: []*descriptorpb.FieldDescriptorProto{
					field("wall_time", 1, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE, nil, ""),
					field("step", 2, descriptorpb.FieldDescriptorProto_TYPE_INT64, nil, ""),
					field("file_version", 3, descriptorpb.FieldDescriptorProto_TYPE_STRING, zero, ""),
					field("summary", 5, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, zero, ".tensorboard.Summary"),
				},
				OneofDecl: []*descriptorpb.OneofDescriptorProto{{Name: proto.String("what")}},
			},
		},
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		return descriptors{}, fmt.Errorf("tb: descriptors: %w", err)
	}
	sum := fd.Messages().ByName("Summary")
	return descriptors{event: fd.Messages().ByName("Event"), summary: sum, value: sum.Messages().ByName("Value")}, nil
}

// Scalar is one tagged value of an event.
type Scalar struct {
	Tag   string
	Value float32
}

func (d descriptors) fileVersion(wall float64) ([]byte, error) {
	ev := dynamicpb.NewMessage(d.event)
	f := d.event.Fields()
	ev.Set(f.ByName("wall_time"), protoreflect.ValueOfFloat64(wall))
	ev.Set(f.ByName("file_version"), protoreflect.ValueOfString("brain.Event:2"))
	return marshal(ev)
}

func (d descriptors) scalars(wall float64, step int64, vals []Scalar) ([]byte, error) {
	sum := dynamicpb.NewMessage(d.summary)
	list := sum.Mutable(d.summary.Fields().ByName("value")).List()
	vf := d.value.Fields()
	for _, s := range vals {
		v := dynamicpb.NewMessage(d.value)
		v.Set(vf.ByName("tag"), protoreflect.ValueOfString(s.Tag))
		v.Set(vf.ByName("simple_value"), protoreflect.ValueOfFloat32(s.Value))
		list.Append(protoreflect.ValueOfMessage(v))
	}
	ev := dynamicpb.NewMessage(d.event)
	f := d.event.Fields()
	ev.Set(f.ByName("wall_time"), protoreflect.ValueOfFloat64(wall))
	ev.Set(f.ByName("step"), protoreflect.ValueOfInt64(step))
	ev.Set(f.ByName("summary"), protoreflect.ValueOfMessage(sum))
	return marshal(ev)
}

// step decodes the step of an event record.
func (d descriptors) step(b []byte) (int64, bool, error) {
	ev := dynamicpb.NewMessage(d.event)
	if err := proto.Unmarshal(b, ev); err != nil {
		return 0, false, err
	}
	isSummary := ev.Has(d.event.Fields().ByName("summary"))
	return ev.Get(d.event.Fields().ByName("step")).Int(), isSummary, nil
}

func marshal(m proto.Message) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("tb: %w", err)
	}
	return b, nil
}
