const {build}=require('esbuild');const z=require('zlib');const fs=require('fs');
(async()=>{for (const e of ['src/index.ts','.exp/index.ts']){await build({entryPoints:[e],bundle:true,minify:true,format:'esm',platform:'browser',target:['es2020'],outfile:'/tmp/h26js/x.js',legalComments:'none'});const r=fs.readFileSync('/tmp/h26js/x.js');console.log(e, r.length,z.gzipSync(r,{level:9}).length)}})()
