/*
 * Build step of client_sdk/jvm (pom.xml, phase process-classes): removes the LocalVariableTable
 * and LocalVariableTypeTable attributes from the library's class files, as javac does by default
 * (-g:source,lines), the CLASS-retention nullability annotations of private and synthetic
 * members (no caller sees them), and the SourceDebugExtension attribute (JVMS §4.7.11: the SMAP
 * the Kotlin compiler writes for code it inlined, which only a debugger stepping through an inlined
 * body reads; -Xno-source-debug-extension drops only its annotation copy, and the library's
 * inline functions are internal, so no consumer's compiler inlines them and needs it).
 * Line numbers and source file names stay, so stack traces keep their lines (a frame inside an
 * inlined lambda shows the line number the compiler gave it, past the file's end); what goes is
 * the debugger's names of local variables (and Kotlin's inline-scope markers), a tenth of the jar,
 * and the inline line maps (2.9 KB of it). Run with the JDK's source launcher: java StripLocals.java DIR.
 * Written from the class file format (JVMS §4); it rewrites attribute tables only.
 */
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.List;
import java.util.stream.Collectors;
import java.util.stream.Stream;

public final class StripLocals {
    public static void main(String[] args) throws IOException {
        List<Path> classes;
        try (Stream<Path> s = Files.walk(Paths.get(args[0]))) {
            classes = s.filter(p -> p.toString().endsWith(".class")).collect(Collectors.toList());
        }
        for (Path p : classes) Files.write(p, strip(Files.readAllBytes(p)));
    }

    static byte[] strip(byte[] data) throws IOException {
        DataInputStream in = new DataInputStream(new java.io.ByteArrayInputStream(data));
        ByteArrayOutputStream bytes = new ByteArrayOutputStream(data.length);
        DataOutputStream out = new DataOutputStream(bytes);
        out.writeInt(in.readInt());              // magic
        out.writeInt(in.readInt());              // minor, major
        int count = in.readUnsignedShort();
        out.writeShort(count);
        String[] utf8 = new String[count];
        for (int i = 1; i < count; i++) {
            int tag = in.readUnsignedByte();
            out.writeByte(tag);
            switch (tag) {
                case 1: { String s = in.readUTF(); utf8[i] = s; out.writeUTF(s); break; }
                case 3: case 4: out.writeInt(in.readInt()); break;
                case 5: case 6: out.writeLong(in.readLong()); i++; break;
                case 7: case 8: case 16: case 19: case 20: out.writeShort(in.readUnsignedShort()); break;
                case 9: case 10: case 11: case 12: case 17: case 18: out.writeInt(in.readInt()); break;
                case 15: out.writeByte(in.readUnsignedByte()); out.writeShort(in.readUnsignedShort()); break;
                default: throw new IOException("constant pool tag " + tag);
            }
        }
        out.writeShort(in.readUnsignedShort());  // access
        out.writeShort(in.readUnsignedShort());  // this
        out.writeShort(in.readUnsignedShort());  // super
        int interfaces = in.readUnsignedShort();
        out.writeShort(interfaces);
        for (int i = 0; i < interfaces; i++) out.writeShort(in.readUnsignedShort());
        for (int kind = 0; kind < 2; kind++) {   // fields, then methods
            int n = in.readUnsignedShort();
            out.writeShort(n);
            for (int i = 0; i < n; i++) {
                int access = in.readUnsignedShort();
                out.writeShort(access);
                out.writeShort(in.readUnsignedShort());
                out.writeShort(in.readUnsignedShort());
                // nullability hints (@NotNull, CLASS retention) serve callers: kept on public and protected members
                attributes(in, out, utf8, (access & 0x0005) == 0 || (access & 0x1000) != 0);
            }
        }
        attributes(in, out, utf8, false);
        if (in.read() != -1) throw new IOException("trailing bytes");
        return bytes.toByteArray();
    }

    private static void attributes(DataInputStream in, DataOutputStream out, String[] utf8, boolean hidden) throws IOException {
        int n = in.readUnsignedShort();
        ByteArrayOutputStream kept = new ByteArrayOutputStream();
        DataOutputStream k = new DataOutputStream(kept);
        int count = 0;
        for (int i = 0; i < n; i++) {
            int name = in.readUnsignedShort();
            byte[] body = new byte[in.readInt()];
            in.readFully(body);
            String s = utf8[name];
            if (hidden && ("RuntimeInvisibleAnnotations".equals(s) || "RuntimeInvisibleParameterAnnotations".equals(s))) continue;
            if ("SourceDebugExtension".equals(s)) continue;
            if ("Code".equals(s)) body = code(body, utf8);
            k.writeShort(name);
            k.writeInt(body.length);
            k.write(body);
            count++;
        }
        out.writeShort(count);
        out.write(kept.toByteArray());
    }

    private static byte[] code(byte[] body, String[] utf8) throws IOException {
        DataInputStream in = new DataInputStream(new java.io.ByteArrayInputStream(body));
        ByteArrayOutputStream bytes = new ByteArrayOutputStream(body.length);
        DataOutputStream out = new DataOutputStream(bytes);
        out.writeInt(in.readInt());              // max_stack, max_locals
        byte[] code = new byte[in.readInt()];
        in.readFully(code);
        out.writeInt(code.length);
        out.write(code);
        int handlers = in.readUnsignedShort();
        out.writeShort(handlers);
        for (int i = 0; i < 4 * handlers; i++) out.writeShort(in.readUnsignedShort());
        int n = in.readUnsignedShort();
        ByteArrayOutputStream kept = new ByteArrayOutputStream();
        DataOutputStream k = new DataOutputStream(kept);
        int keptCount = 0;
        for (int i = 0; i < n; i++) {
            int name = in.readUnsignedShort();
            byte[] a = new byte[in.readInt()];
            in.readFully(a);
            String s = utf8[name];
            if ("LocalVariableTable".equals(s) || "LocalVariableTypeTable".equals(s)) continue;
            k.writeShort(name);
            k.writeInt(a.length);
            k.write(a);
            keptCount++;
        }
        out.writeShort(keptCount);
        out.write(kept.toByteArray());
        return bytes.toByteArray();
    }
}
