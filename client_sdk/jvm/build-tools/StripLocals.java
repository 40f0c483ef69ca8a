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
 *
 * Given the Kotlin sources as a second argument (java StripLocals.java DIR SOURCES; phase
 * prepare-package, after the tests compiled against the full classes), it also removes the
 * kotlin.Metadata annotation from the classes the sources declare `internal` or `private` at top
 * level, and from their nested classes: only the Kotlin compiler reads it (this SDK uses no
 * kotlin-reflect), and no other module's compiler may use those classes, so it was 12.9 KB of the jar
 * that no consumer reads. (A Kotlin caller now sees them as it sees Java classes, public in the
 * bytecode as they were to Java callers.)
 */
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.charset.StandardCharsets;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.Stream;

public final class StripLocals {
    /** A top-level Kotlin declaration of a class, object or interface that other modules cannot use. */
    private static final Pattern INTERNAL = Pattern.compile(
        "^(?:internal|private)\\s+(?:(?:data|abstract|sealed|enum|open|inline|value|fun)\\s+)*(?:class|object|interface)\\s+(\\w+)",
        Pattern.MULTILINE);
    private static final Pattern PACKAGE = Pattern.compile("^package\\s+([\\w.]+)", Pattern.MULTILINE);

    public static void main(String[] args) throws IOException {
        Path root = Paths.get(args[0]);
        List<Path> classes;
        try (Stream<Path> s = Files.walk(root)) {
            classes = s.filter(p -> p.toString().endsWith(".class")).collect(Collectors.toList());
        }
        Set<String> internal = args.length > 1 ? internalClasses(Paths.get(args[1])) : new HashSet<>();
        for (Path p : classes) {
            String name = root.relativize(p).toString().replace('\\', '/').replaceAll("\\.class$", "");
            int nested = name.indexOf('$');
            boolean dropMetadata = internal.contains(nested < 0 ? name : name.substring(0, nested));
            Files.write(p, strip(Files.readAllBytes(p), dropMetadata));
        }
    }

    /** The class file names (package/Name) of the classes the Kotlin sources declare internal or private. */
    static Set<String> internalClasses(Path sources) throws IOException {
        Set<String> names = new HashSet<>();
        List<Path> files;
        try (Stream<Path> s = Files.walk(sources)) {
            files = s.filter(p -> p.toString().endsWith(".kt")).collect(Collectors.toList());
        }
        for (Path f : files) {
            String text = new String(Files.readAllBytes(f), StandardCharsets.UTF_8);
            Matcher pkg = PACKAGE.matcher(text);
            String prefix = pkg.find() ? pkg.group(1).replace('.', '/') + "/" : "";
            for (Matcher m = INTERNAL.matcher(text); m.find(); ) names.add(prefix + m.group(1));
        }
        return names;
    }

    static byte[] strip(byte[] data, boolean dropMetadata) throws IOException {
        DataInputStream in = new DataInputStream(new java.io.ByteArrayInputStream(data));
        int magic = in.readInt();
        int version = in.readInt();              // minor, major
        int count = in.readUnsignedShort();
        String[] utf8 = new String[count];
        int[] tags = new int[count];
        byte[][] entries = new byte[count][];    // each entry's bytes after its tag
        boolean[] used = new boolean[count];     // UTF-8 entries something kept refers to
        for (int i = 1; i < count; i++) {
            int tag = in.readUnsignedByte();
            tags[i] = tag;
            int size;
            switch (tag) {
                case 1: { utf8[i] = in.readUTF(); continue; }
                case 3: case 4: size = 4; break;
                case 5: case 6: size = 8; break;
                case 7: case 8: case 16: case 19: case 20: size = 2; break;
                case 9: case 10: case 11: case 12: case 17: case 18: size = 4; break;
                case 15: size = 3; break;
                default: throw new IOException("constant pool tag " + tag);
            }
            entries[i] = new byte[size];
            in.readFully(entries[i]);
            if (tag == 7 || tag == 8 || tag == 16 || tag == 19 || tag == 20) used[u2(entries[i], 0)] = true;
            if (tag == 12) { used[u2(entries[i], 0)] = true; used[u2(entries[i], 2)] = true; }
            if (tag == 5 || tag == 6) i++;
        }
        ByteArrayOutputStream rest = new ByteArrayOutputStream(data.length);
        DataOutputStream out = new DataOutputStream(rest);
        Refs refs = new Refs(used);
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
                int name = in.readUnsignedShort();
                int descriptor = in.readUnsignedShort();
                used[name] = used[descriptor] = true;
                out.writeShort(name);
                out.writeShort(descriptor);
                // nullability hints (@NotNull, CLASS retention) serve callers: kept on public and protected members
                attributes(in, out, utf8, (access & 0x0005) == 0 || (access & 0x1000) != 0, refs, false);
            }
        }
        attributes(in, out, utf8, false, refs, dropMetadata);
        if (in.read() != -1) throw new IOException("trailing bytes");
        // the names and descriptors only the dropped tables used are left as empty strings (indices stay)
        ByteArrayOutputStream bytes = new ByteArrayOutputStream(data.length);
        DataOutputStream head = new DataOutputStream(bytes);
        head.writeInt(magic);
        head.writeInt(version);
        head.writeShort(count);
        for (int i = 1; i < count; i++) {
            if (tags[i] == 0) continue;           // the second slot of a long or double
            head.writeByte(tags[i]);
            if (tags[i] == 1) head.writeUTF(used[i] || refs.unknown ? utf8[i] : "");
            else head.write(entries[i]);
        }
        head.write(rest.toByteArray());
        return bytes.toByteArray();
    }

    private static int u2(byte[] b, int at) {
        return (b[at] & 0xff) << 8 | (b[at + 1] & 0xff);
    }

    /** The UTF-8 constants the kept attributes refer to (JVMS §4.7); [unknown]: an attribute this step cannot read was kept. */
    private static final class Refs {
        final boolean[] used;
        boolean unknown;

        Refs(boolean[] used) {
            this.used = used;
        }

        void attribute(String name, byte[] body) throws IOException {
            DataInputStream in = new DataInputStream(new java.io.ByteArrayInputStream(body));
            switch (name) {
                case "Signature": case "SourceFile": used[in.readUnsignedShort()] = true; break;
                case "RuntimeVisibleAnnotations": case "RuntimeInvisibleAnnotations": {
                    int n = in.readUnsignedShort();
                    for (int i = 0; i < n; i++) annotation(in);
                    break;
                }
                case "RuntimeVisibleParameterAnnotations": case "RuntimeInvisibleParameterAnnotations": {
                    int params = in.readUnsignedByte();
                    for (int p = 0; p < params; p++) {
                        int n = in.readUnsignedShort();
                        for (int i = 0; i < n; i++) annotation(in);
                    }
                    break;
                }
                case "AnnotationDefault": value(in); break;
                case "InnerClasses": {
                    int n = in.readUnsignedShort();
                    for (int i = 0; i < n; i++) {
                        in.readUnsignedShort();
                        in.readUnsignedShort();
                        used[in.readUnsignedShort()] = true;   // the simple name (0: anonymous)
                        in.readUnsignedShort();
                    }
                    break;
                }
                case "MethodParameters": {
                    int n = in.readUnsignedByte();
                    for (int i = 0; i < n; i++) {
                        used[in.readUnsignedShort()] = true;
                        in.readUnsignedShort();
                    }
                    break;
                }
                // these refer to class, name-and-type, method-handle or loadable entries, never to UTF-8 ones
                case "Code": case "LineNumberTable": case "StackMapTable": case "BootstrapMethods": case "ConstantValue":
                case "Exceptions": case "EnclosingMethod": case "NestHost": case "NestMembers": case "PermittedSubclasses":
                case "Deprecated": case "Synthetic":
                    break;
                default: unknown = true;
            }
        }

        private void annotation(DataInputStream in) throws IOException {
            used[in.readUnsignedShort()] = true;     // type
            int pairs = in.readUnsignedShort();
            for (int i = 0; i < pairs; i++) {
                used[in.readUnsignedShort()] = true; // element name
                value(in);
            }
        }

        private void value(DataInputStream in) throws IOException {
            int tag = in.readUnsignedByte();
            switch (tag) {
                case 'e': used[in.readUnsignedShort()] = true; used[in.readUnsignedShort()] = true; break;
                case '@': annotation(in); break;
                case '[': { int n = in.readUnsignedShort(); for (int i = 0; i < n; i++) value(in); break; }
                case 'c': case 's': used[in.readUnsignedShort()] = true; break;
                default: in.readUnsignedShort();      // B C D F I J S Z: a numeric constant entry
            }
        }
    }

    private static void attributes(DataInputStream in, DataOutputStream out, String[] utf8, boolean hidden, Refs refs,
                                   boolean dropMetadata) throws IOException {
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
            if ("Code".equals(s)) body = code(body, utf8, refs);
            if (dropMetadata && "RuntimeVisibleAnnotations".equals(s)) {
                body = without(body, utf8, "Lkotlin/Metadata;");
                if (body == null) continue;
            }
            refs.used[name] = true;
            refs.attribute(s, body);
            k.writeShort(name);
            k.writeInt(body.length);
            k.write(body);
            count++;
        }
        out.writeShort(count);
        out.write(kept.toByteArray());
    }

    /** An annotations attribute's body without the annotations of type [type]; null when none is left. */
    private static byte[] without(byte[] body, String[] utf8, String type) throws IOException {
        java.io.ByteArrayInputStream bytes = new java.io.ByteArrayInputStream(body);
        DataInputStream in = new DataInputStream(bytes);
        Refs skip = new Refs(new boolean[utf8.length]);   // reads one annotation; marks nothing that is kept
        int n = in.readUnsignedShort();
        ByteArrayOutputStream kept = new ByteArrayOutputStream();
        int count = 0;
        for (int i = 0; i < n; i++) {
            int start = body.length - bytes.available();
            skip.annotation(in);
            int end = body.length - bytes.available();
            if (type.equals(utf8[u2(body, start)])) continue;
            kept.write(body, start, end - start);
            count++;
        }
        if (count == 0) return null;
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        new DataOutputStream(out).writeShort(count);
        kept.writeTo(out);
        return out.toByteArray();
    }

    private static byte[] code(byte[] body, String[] utf8, Refs refs) throws IOException {
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
            refs.used[name] = true;
            refs.attribute(s, a);
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
