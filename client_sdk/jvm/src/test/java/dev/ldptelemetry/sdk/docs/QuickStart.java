package dev.ldptelemetry.sdk.docs;

import dev.ldptelemetry.sdk.ClientOptions;
import dev.ldptelemetry.sdk.TelemetryClient;
import java.io.File;

public class QuickStart {
    public static void main(String[] args) {
        String endpoint = System.getenv().getOrDefault("LDPT_ENDPOINT", "http://127.0.0.1:8080");
        TelemetryClient telemetry = new TelemetryClient(ClientOptions.builder()
                .endpoint(endpoint)
                .stateDir(new File(System.getProperty("user.home"), ".local/share/myapp/ldpt"))
                .build());
        telemetry.report("theme", "light");
        telemetry.report("startup_ms", 812.0);
        System.out.println(telemetry.flush(10_000));   // true when the collector acknowledged everything
        telemetry.close();
    }
}
